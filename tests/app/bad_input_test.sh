#!/usr/bin/env bash
# The bad-input catalogue (issue 16): a table of bad inputs to every command, config,
# data format and checkpoint file. Each must exit with code 2 and one message that
# names the file, key or field and says what was expected and what was found, with no
# stack trace, leaving everything written before unchanged (docs/errors.md lists
# the messages). Usage: bad_input_test.sh KILN PYTHON [NAME_PATTERN]
# (PYTHON: the torch wheel's, for the forged .pt rows; NAME_PATTERN: run only the
# rows whose name matches this extended regex).
set -uo pipefail
kiln="$(realpath "$1")"
py="$2"
only="${3:-}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
files="$root/tests/app/bad_input_files.py"
T="$root/configs/tiny.toml"
# In memory where there is a tmpfs: some 3,000 small files are copied, hashed and removed.
tmp="$(mktemp -d -p "$([[ -d /dev/shm && -w /dev/shm ]] && echo /dev/shm || echo "${TMPDIR:-/tmp}")")"
trap 'rm -rf "$tmp"' EXIT
failures=0; rows=0

# --- What every row starts from, made once: a small finished run with its checkpoint,
# a small text GPT for kiln sample, Fashion-MNIST-shaped IDX files, forged .pt files.
base="$tmp/base"
mkdir -p "$base/idx" "$base/forged"
"$py" "$files" idx "$base/idx/train-images-idx3-ubyte.gz" 640 28 28
"$py" "$files" idx "$base/idx/train-labels-idx1-ubyte.gz" 640
"$py" "$files" idx "$base/idx/t10k-images-idx3-ubyte.gz" 64 28 28
"$py" "$files" idx "$base/idx/t10k-labels-idx1-ubyte.gz" 64
for _ in $(seq 100); do printf 'the cat sat on the mat. '; done > "$base/corpus.txt"
"$kiln" train "$T" --run-dir "$base/gpt" --quiet --set data.format=text --set data.train="$base/corpus.txt" \
  --set data.block_size=8 --set data.stride=8 --set model.name=gpt --set model.blocks=1 \
  --set model.embed=8 --set model.heads=2 >/dev/null 2>&1 &
gpt=$!
"$kiln" train "$T" --run-dir "$base/run" --quiet --set data.root="$base/idx" \
  --set 'model.hidden=[8]' >/dev/null 2>&1 || { echo "FAIL: the fixture run did not train"; exit 1; }
wait $gpt || { echo "FAIL: the fixture GPT run did not train"; exit 1; }
ckname="$(basename "$(ls -d "$base/run/checkpoints"/step_*)")"
gckname="$(basename "$(ls -d "$base/gpt/checkpoints"/step_*)")"
"$py" "$files" forge_pt "$base/run/checkpoints/$ckname/trainer.pt" "$base/forged" 2>"$tmp/forge.err" \
  || { echo "FAIL: forging .pt files with torch:"; cat "$tmp/forge.err"; exit 1; }

# --- Helpers the rows' setup uses; each row runs in its own directory $c holding a copy
# of the run ($c/run, checkpoint $ck) and, for a row that names gpt, of the GPT run
# ($c/gpt, checkpoint $gck).
f() { "$py" "$files" "$@"; }
reseal() { f reseal "$ck" "$@"; }                      # FILE...: manifest bytes/crc32 updated
ck_cut() { f cut "$ck/$1" "$2" && reseal "$1"; }        # FILE KEEP: truncated, resealed
ck_poke() { f poke "$ck/$1" "$2" "$3" && reseal "$1"; } # FILE OFFSET HEX: overwritten, resealed
ck_put() { cp "$2" "$ck/$1" && reseal "$1"; }           # FILE SOURCE: replaced, resealed
ck_text() { printf '%b' "$2" > "$ck/$1" && reseal "$1"; }  # FILE TEXT: replaced, resealed
ck_st() { f st_edit "$ck/model.safetensors" "$1" && reseal model.safetensors; }
ck_manifest() { f manifest "$ck" "$1"; }
idx_copy() { cp -r "$base/idx" "$c/idx"; }

# snapshot DIR: every entry's type and path, and every file's SHA-256.
snapshot() { (cd "$1" && find . -printf '%y %p\n' && find . -type f -exec sha256sum {} +) | LC_ALL=C sort; }

# --- The table. Columns, split at " | ":
#   name | setup (bash, run in $c; - for none) | kiln's arguments (expanded in $c; leading
#   NAME=VALUE words set its environment) | fragments of the message
# The fragments (fixed strings, ";;" between them) must all appear in kiln's stderr.
# Lines starting with # are comments.
table() { cat <<'EOF'
cli-no-command           | -  |                                              | COMMAND: expected one of train, export, sample, summary, report;;found none
cli-unknown-command      | -  | trian                                        | unknown command 'trian';;valid commands: train, export
train-unknown-option     | -  | train $T --bogus                             | bogus;;does not exist;;kiln train --help
train-option-no-value    | -  | train $T --run-dir                           | run-dir;;is missing an argument
train-log-format         | -  | train $T --log-format xml                    | --log-format: expected text or json, found "xml"
model-too-big            | -  | train $T --run-dir new --set 'model.hidden=[2000000000]' | model: the mlp this config describes does not fit in memory (;;while making its parameters): expected model sizes (model.*) whose parameters this machine can hold
model-too-big-heap       | -  | KILN_CPU_BLOCK_CACHE=off train $T --run-dir new --set 'model.hidden=[2000000000]' | model: the mlp this config describes does not fit in memory (;;DefaultCPUAllocator
train-profile-range      | -  | train $T --profile 5:3                       | profile.steps: expected "A:B";;found "5:3"
train-resume-and-config  | -  | train $T --resume run                        | --resume run;;give --set overrides instead of a CONFIG file
train-resume-and-run-dir | -  | train --resume run --run-dir x               | --run-dir x cannot be given with it
train-resume-nothing     | -  | train --resume nowhere                       | nowhere: --resume: expected a checkpoint directory;;found nothing
train-resume-neither     | mkdir empty | train --resume empty                  | empty: --resume: expected a checkpoint directory;;found a directory with neither
train-run-dir-taken      | -  | train $T --run-dir run                       | run: already holds a run;;--resume run
train-resume-aside       | mkdir -p run/superseded && cp -r $ck run/superseded/ | train --resume run/superseded/$ckname | run/superseded/step_;;: --resume: expected a checkpoint in a run's checkpoints/ folder;;/run/superseded/ (set aside when the run was resumed from an earlier step;;--set model.init_from="run/superseded/step_
train-resume-loose       | cp -r $ck loose | train --resume loose      | loose: --resume: expected a checkpoint in a run's checkpoints/ folder (RUN/checkpoints/step_N), found one in;;--set model.init_from="loose"
train-run-dir-foreign    | mkdir mine && echo mine > mine/config.toml | train $T --run-dir mine | mine: --run-dir: expected a new directory, an empty one or a run of kiln's, found mine/config.toml there;;which the run would write over
train-run-dir-is-file    | touch afile | train $T --run-dir afile/sub          | afile/sub: cannot create the run directory
export-no-checkpoint     | -  | export --format npy --out x                  | CHECKPOINT: expected a checkpoint or run directory, found none
export-bad-format        | -  | export run --format onnx --out x.onnx        | --format: expected one of safetensors, npy, torch, found "onnx"
export-no-out            | -  | export run --format npy                      | --out: expected the path to write, found none
export-out-exists        | touch x.pt | export run --format torch --out x.pt   | x.pt: --out: already exists;;--force
export-unknown-option    | -  | export run --format npy --out x --bogus      | bogus;;does not exist;;kiln export --help
sample-tokens-zero       | -  | sample gpt --tokens 0                        | --tokens: expected >= 1, found 0
sample-tokens-text       | -  | sample gpt --tokens many                     | --tokens: expected an integer, found 'many' (see kiln sample --help)
sample-temperature       | -  | sample gpt --temperature -1                  | --temperature: expected a number >= 0;;found -1
sample-seed-negative     | -  | sample gpt --seed=-1                         | --seed: expected an integer >= 0, found '-1'
sample-top-k             | -  | sample gpt --top-k -2                        | --top-k: expected >= 0 (0 = all), found -2
sample-threads-huge      | -  | sample gpt --threads 100000                  | --threads: expected an integer in 0..1024 (0 = the CPUs this process may use), found 100000
train-threads-huge       | -  | train $T --set train.threads=100000 --run-dir new | --set: train.threads: expected an integer in 0..1024 (0 = the CPUs this process may use), found 100000
sample-prompt-unknown    | -  | sample gpt --prompt Q                        | --prompt: ;;U+0051;;characters of its training text
sample-not-gpt           | -  | sample run                                   | model.name: expected a language model trained on text (gpt), found "mlp"
summary-bad-set          | -  | summary $T --set model.name=resnet           | model.name: expected one of: "mlp";;found "resnet"
summary-unknown-option   | -  | summary $T --run-dir x                       | run-dir;;does not exist;;kiln summary --help
report-no-run            | -  | report                                       | RUN_DIR: expected a run directory, found none
report-not-a-run         | mkdir nope | report nope                           | nope: expected a run directory (with metrics.jsonl;;found a directory without one
report-two-runs-no-out   | cp -r run run2 | report run run2                   | -o: expected the file to write the report of 2 runs to, found none
report-out-not-report    | echo keep > notes.txt | report run -o notes.txt    | notes.txt: -o: already exists and is not a kiln report
report-bad-metrics-line  | sed -i '2s/.*/{"split":"train","st/' run/metrics.jsonl | report run | metrics.jsonl:2: expected a JSON object, found
config-missing           | -  | train nope.toml                              | nope.toml: cannot read the config file
config-directory         | mkdir conf.d | train conf.d                        | conf.d: expected a config file (TOML), found a directory
config-syntax            | printf '[train]\nepochs = = 3\n' > x.toml | train x.toml | x.toml:2:10: TOML syntax error;;(found "= 3")
config-duplicate-key     | printf '[train]\nepochs = 1\nepochs = 2\n' > x.toml | train x.toml | x.toml:3:10: TOML syntax error;;cannot redefine existing integer 'epochs';;(found "2")
config-unknown-section   | printf '[trian]\nepochs = 3\n' > x.toml | train x.toml | x.toml:1:1: unknown section [trian];;valid sections: run, data
config-unknown-key       | printf '[train]\nepoch = 3\n' > x.toml | train x.toml | x.toml:2:9: unknown key 'epoch' in [train];;valid keys: epochs
config-wrong-type        | printf '[train]\nepochs = "ten"\n' > x.toml | train x.toml | x.toml:2:10: [train] epochs: expected an integer, found string "ten"
config-array-element     | printf '[model]\nhidden = [64, "a"]\n' > x.toml | train x.toml | [model] hidden: expected an array of integers, found array
config-section-not-table | printf 'train = 3\n' > x.toml | train x.toml     | x.toml:1:9: [train]: expected a table, found integer 3
config-out-of-range      | printf '[train]\nbatch_size = 0\n' > x.toml | train x.toml | x.toml:2:14: train.batch_size: expected an integer > 0, found 0
set-no-equals            | -  | train $T --set train.epochs                  | --set train.epochs: expected section.key=value, found no '='
set-unknown-section      | -  | train $T --set trian.epochs=3                | --set trian.epochs=3: unknown section [trian]
set-unknown-key          | -  | train $T --set train.epoch=3                 | --set train.epoch=3: unknown key 'epoch' in [train];;valid keys
set-wrong-type           | -  | train $T --set train.epochs=x                | [train] epochs: expected an integer, found string "x"
set-too-large            | -  | train $T --set train.epochs=99999999999999999999 | [train] epochs: expected an integer, found string "99999999999999999999"
set-unknown-model        | -  | train $T --set model.name=resnet             | model.name: expected one of: "mlp";;found "resnet"
set-unknown-optimizer    | -  | train $T --set optim.name=adam               | optim.name: expected one of: "adamw";;found "adam"
set-unknown-schedule     | -  | train $T --set schedule.name=step            | schedule.name: expected one of: "constant";;found "step"
set-negative-lr          | -  | train $T --set optim.lr=-1                   | optim.lr: expected a number > 0, found -1.0
set-nan                  | -  | train $T --set model.sigmoid_beta=nan        | model.sigmoid_beta: expected a finite number > 0, found nan
set-accumulate           | -  | train $T --set train.accumulate=3            | train.accumulate: expected a divisor of train.batch_size (64), found 3
set-min-lr               | -  | train $T --set schedule.min_lr=1             | schedule.min_lr: expected a number in [0, optim.lr] (0.001), found 1.0
set-sgd-nesterov         | -  | train $T --set optim.name=sgd --set optim.nesterov=true | nesterov: expected momentum > 0;;got momentum 0
set-device               | -  | train $T --set train.device=cuda:x           | train.device: expected cpu, cuda or cuda:N, found "cuda:x"
set-on-resume            | -  | train --resume run --set train.epochs=x      | --set train.epochs=x: [train] epochs: expected an integer, found string "x"
idx-root-missing         | -  | train $T --set data.root=nowhere --run-dir new | nowhere: data.root: expected a directory with the Fashion-MNIST IDX files, found none
idx-file-missing         | idx_copy; rm idx/t10k-labels-idx1-ubyte.gz | train $T --set data.root=idx --run-dir new | t10k-labels-idx1-ubyte.gz: no such file
idx-raw-truncated        | idx_copy; gunzip idx/train-images-idx3-ubyte.gz; f cut idx/train-images-idx3-ubyte 1000 | train $T --set data.root=idx --run-dir new | train-images-idx3-ubyte: truncated: the header declares 501760 data bytes (shape [640, 28, 28]), the file has 984
idx-gz-magic             | idx_copy; printf '\x00\x00\x0d\x03' > idx/train-images-idx3-ubyte; gzip -f idx/train-images-idx3-ubyte | train $T --set data.root=idx --run-dir new | train-images-idx3-ubyte.gz: expected IDX data type 0x08 (unsigned byte), found 0xd
idx-gz-corrupt           | idx_copy; f poke idx/train-images-idx3-ubyte.gz 30 deadbeefdeadbeef | train $T --set data.root=idx --run-dir new | train-images-idx3-ubyte.gz: expected an IDX file, plain or gzip-compressed, found a damaged gzip stream (zlib: 
idx-label-count          | idx_copy; f idx idx/train-labels-idx1-ubyte.gz 639 | train $T --set data.root=idx --run-dir new | train-labels-idx1-ubyte.gz: has 639 labels but;;has 640 images
idx-label-range          | idx_copy; gunzip idx/train-labels-idx1-ubyte.gz; f poke idx/train-labels-idx1-ubyte 8 0c | train $T --set data.root=idx --run-dir new | train-labels-idx1-ubyte: expected labels in 0..9, found 12
idx-label-rank           | idx_copy; f idx idx/t10k-labels-idx1-ubyte.gz 64 1 | train $T --set data.root=idx --run-dir new | t10k-labels-idx1-ubyte.gz: expected rank 1 (count), found rank 2
data-relative-set        | -  | train $T --set data.train=nope.csv --set data.label=y --run-dir new | --set: data.train = "nope.csv": expected a file or folder, found nothing at;;/nope.csv (a relative path is taken from the working directory,
data-relative-config     | printf '[data]\ntrain = "tables/x.csv"\nlabel = "y"\n' > c.toml | train c.toml --run-dir new | c.toml:2:9: data.train = "tables/x.csv": expected a file or folder, found nothing at;;/tables/x.csv (a relative path is taken from the working directory,
csv-ragged               | printf 'a,b,y\n1,2,p\n3,4\n' > t.csv | train $T --set data.train=t.csv --set data.label=y --run-dir new | t.csv: line 3: expected 3 fields (as the header has), found 2
csv-open-quote           | printf 'a,b,y\n1,"2,p\n3,4,q\n' > t.csv | train $T --set data.train=t.csv --set data.label=y --run-dir new | t.csv: line 2, column 2: the quote opened here is never closed
csv-no-label             | printf 'a,b,y\n1,2,p\n3,4,q\n' > t.csv | train $T --set data.train=t.csv --set data.label=z --run-dir new | t.csv: data.label: expected one of the columns (a, b, y), found 'z'
csv-mixed-column         | printf 'a,b,y\n1,2,p\n3,x,q\n' > t.csv | train $T --set data.train=t.csv --set data.label=y --run-dir new | t.csv: line 3, column 2 (b): expected a number;;found 'x'
csv-latin1               | printf 'a,b,y\n1,2,caf\xe9\n3,4,cr\xe8me\n' > t.csv | train $T --set data.train=t.csv --set data.label=y --run-dir new | t.csv: invalid UTF-8 at byte 13 (line 2, column 8): bytes E9;;expected UTF-8: convert the table
csv-delimiter            | printf 'a;b;y\n1;2;p\n3;4;q\n' > t.csv | train $T --set data.train=t.csv --set data.label=y --run-dir new | t.csv: data.label: expected one of the columns (a;b;y), found 'y'; the header is one column, which ';' would split into 3: set data.delimiter = ";"
npy-not-one-hot          | f npy x.npy '<f4' '(4, 2)' 00000000 8; f npy y.npy '<i8' '(4, 2)' 0100000000000000 8 | train $T --set data.train=x.npy --set data.train_targets=y.npy --run-dir new | y.npy: class labels: expected shape (N), (N, 1) or one-hot rows (N, K), found (4, 2) with row 0 not one-hot (1, 1)
npy-magic                | printf 'not numpy' > x.npy; cp x.npy y.npy | train $T --set data.train=x.npy --set data.train_targets=y.npy --run-dir new | x.npy: not an .npy file (expected the magic \x93NUMPY)
npy-truncated            | f npy x.npy '<f4' '(4, 2)' 00000000 3; f npy y.npy '<i8' '(4,)' 0000000000000000 4 | train $T --set data.train=x.npy --set data.train_targets=y.npy --run-dir new | x.npy: ;;shape [4, 2] of Float needs 32 data bytes, the file has 12
npy-dtype                | f npy x.npy '<c8' '(4, 2)' 0000000000000000 8; f npy y.npy '<i8' '(4,)' 0000000000000000 4 | train $T --set data.train=x.npy --set data.train_targets=y.npy --run-dir new | x.npy: header: descr '<c8': expected one of
npy-strings-as-inputs    | f npy x.npy '<U1' '(4, 2)' 41000000 8; f npy y.npy '<i8' '(4,)' 0000000000000000 4 | train $T --set data.train=x.npy --set data.train_targets=y.npy --run-dir new | x.npy: expected numbers as inputs, found strings
npy-label-unseen         | f npy x.npy '<f4' '(4, 2)' 00000000 8; f npy y.npy '<U1' '(4,)' 41000000 4; f npy ty.npy '<U1' '(4,)' 42000000 4 | train $T --set data.train=x.npy --set data.train_targets=y.npy --set data.test=x.npy --set data.test_targets=ty.npy --run-dir new | ty.npy: index 0: class label "B" is none of the 1 classes of;;y.npy (A)
npy-count                | f npy x.npy '<f4' '(4, 2)' 00000000 8; f npy y.npy '<i8' '(3,)' 0000000000000000 3 | train $T --set data.train=x.npy --set data.train_targets=y.npy --run-dir new | y.npy: has 3 targets but;;x.npy has 4
npy-nan                  | f npy x.npy '<f4' '(4, 2)' 0000c07f 8; f npy y.npy '<i8' '(4,)' 0000000000000000 4 | train $T --set data.train=x.npy --set data.train_targets=y.npy --run-dir new | x.npy: expected finite values, found NaN or inf at flat index 0
npz-no-y                 | f npz d.npz 'x=<f4:(4, 2):00000000:8' | train $T --set data.train=d.npz --run-dir new | d.npz: expected arrays named x and y
npz-truncated            | f npz d.npz 'x=<f4:(4, 2):00000000:8' 'y=<i8:(4,):0000000000000000:4'; f cut d.npz -30 | train $T --set data.train=d.npz --run-dir new | d.npz: byte;;expected
npz-deflate-corrupt      | f npz d.deflated.npz 'x=<f4:(64, 2):00000000:128' 'y=<i8:(64,):0000000000000000:64'; f poke d.deflated.npz 60 ffffffffffff | train $T --set data.train=d.deflated.npz --run-dir new | d.deflated.npz: byte;;deflate data
text-utf8                | printf 'the cat \xff\xfe sat\n' > c.txt | train $T --set data.format=text --set data.train=c.txt --set model.name=gpt --run-dir new | c.txt: invalid UTF-8 at byte 8 (line 1, column 9): bytes FF
text-empty               | : > c.txt | train $T --set data.format=text --set data.train=c.txt --set model.name=gpt --run-dir new | c.txt: empty corpus: the file holds no text
text-short               | printf 'abc\n' > c.txt | train $T --set data.format=text --set data.train=c.txt --set model.name=gpt --run-dir new | expected at least data.block_size + 1 = 33
init-from-neither        | mkdir weights | train $T --set model.init_from=weights --run-dir new | model.init_from: expected a .safetensors file, a checkpoint directory or a run directory (its newest checkpoint), found a directory with neither model.safetensors nor checkpoints/ at;;/weights
init-from-forged-length  | cp $ck/model.safetensors w.safetensors; f st_edit w.safetensors 'n = 1 << 40' | train $T --set model.init_from=w.safetensors --run-dir new | w.safetensors: header length: expected at most
manifest-missing         | rm $ck/manifest.json | export $ck --format npy --out out | manifest.json;;expected a checkpoint directory (with manifest.json)
manifest-not-json        | f cut $ck/manifest.json 40 | train --resume run     | manifest.json: truncated or corrupted: expected JSON
manifest-format          | ck_manifest 'm["format"] = "other"' | train --resume run | manifest.json: format: expected "kiln checkpoint", found "other"
manifest-version         | ck_manifest 'm["version"] = 2' | train --resume run | manifest.json: version: expected 1, found 2
manifest-step-type       | ck_manifest 'm["step"] = "ten"' | train --resume run | manifest.json: step: expected an integer of at most 2^63 - 1, found "ten"
manifest-step-2^63       | ck_manifest 'm["step"] = 2**63' | train --resume run | manifest.json: step: expected an integer of at most 2^63 - 1, found 9223372036854775808
manifest-file-record     | ck_manifest 'm["files"]["trainer.pt"]["bytes"] = -1' | train --resume run | manifest.json: files: trainer.pt: expected {"bytes": N, "crc32": C} with integers N, C >= 0, found {"bytes":-1,
manifest-file-name       | ck_manifest 'm["files"]["../../config.toml"] = {"bytes": 1, "crc32": 1}' | train --resume run | manifest.json: files: expected names of files in the checkpoint directory, found '../../config.toml'
manifest-no-entry        | ck_manifest 'del m["files"]["trainer.pt"]' | train --resume run | manifest.json: files: expected an entry for trainer.pt, found none
manifest-extra-part      | ck_manifest 'm["parts"].append("ema")' | train --resume run | holds 'ema' state (ema.pt), which this run does not have
manifest-size            | f cut $ck/optimizer.pt -10 | train --resume run  | optimizer.pt: truncated or corrupted: expected;;bytes (the manifest's), found
manifest-crc             | f poke $ck/optimizer.pt 100 ff | train --resume run | optimizer.pt: truncated or corrupted: CRC-32;;differs from the manifest's
file-absent              | rm $ck/optimizer.pt | train --resume run            | optimizer.pt: cannot read the file: No such file
safetensors-truncated    | ck_cut model.safetensors 200 | train --resume run | model.safetensors: truncated: the header length says
safetensors-forged-length | ck_st 'n = 1 << 40' | train --resume run          | model.safetensors: header length: expected at most
safetensors-not-json     | ck_poke model.safetensors 8 5b5b5b | train --resume run | model.safetensors: header: expected JSON, found text that does not parse
safetensors-dtype        | ck_st 'h["layers.0.weight"]["dtype"] = "I32"' | train --resume run | model.safetensors: 'layers.0.weight' is Int[8, 784] but the model's is Float[8, 784]
safetensors-shape        | ck_st 'h["layers.0.weight"]["shape"] = [16, 392]' | train --resume run | model.safetensors: 'layers.0.weight' is Float[16, 392] but the model's is Float[8, 784]
safetensors-offsets      | ck_st 'h["layers.0.bias"]["data_offsets"] = [0, 99999]' | train --resume run | model.safetensors: ;;data_offsets
safetensors-no-tensor    | ck_st 'del h["layers.0.bias"]' | train --resume run | model.safetensors: data bytes [0, 32) belong to no tensor
other-model              | -  | train --resume run --set 'model.hidden=[16]'    | model.safetensors: 'layers.0.weight' is Float[8, 784] but the model's is Float[16, 784]
optimizer-truncated      | ck_cut optimizer.pt 1000 | train --resume run      | /optimizer.pt: 
optimizer-garbage        | head -c 4000 /dev/urandom > $ck/optimizer.pt; reseal optimizer.pt | train --resume run | /optimizer.pt: 
trainer-truncated        | ck_cut trainer.pt 3000 | train --resume run        | /trainer.pt: 
trainer-header-bytes     | ck_poke trainer.pt 0 ffffffff | train --resume run | /trainer.pt: 
trainer-step-text        | ck_put trainer.pt $base/forged/trainer_step_text.pt | train --resume run | trainer.pt: step: expected an integer, found
trainer-rng-dtype        | ck_put trainer.pt $base/forged/trainer_rng_float.pt | train --resume run | /trainer.pt: rng_cpu: ;;found a Float tensor of shape [5056]
trainer-step-differs     | ck_put trainer.pt $base/forged/trainer_step_11.pt | train --resume run | trainer.pt: step 11 differs from the manifest's 10
# A TorchScript archive (the form of kiln's older checkpoints) is compiled when it loads:
# its code's syntax error is exit 1, naming no file, until .pt parts are read as data
# alone (issue 16, "a checkpoint file is code").
trainer-script-code      | ck_put trainer.pt $base/forged/trainer_bad_code.pt | train --resume run | /trainer.pt: 
schedule-truncated       | ck_cut schedule.pt 500 | train --resume run        | /schedule.pt: 
scaler-garbage           | head -c 900 /dev/urandom > $ck/scaler.pt; reseal scaler.pt | train --resume run | /scaler.pt: 
config-of-run-broken     | printf '[train\n' >> run/config.toml | train --resume run | run/config.toml:;;TOML syntax error
config-of-run-missing    | rm run/config.toml | train --resume run          | run: --resume: expected a run directory with config.toml, found none
checkpoint-config-broken | ck=$gck; ck_text config.toml '[model]\nname = 7\n' | sample gpt | config.toml:2:8: [model] name: expected a string, found integer 7
data-json-broken         | ck_text data.json '{"format": "idx", "task"' | train --resume run | data.json: expected JSON, found text that does not parse (
data-json-field          | ck_text data.json '{"format": "idx", "task": "dance"}' | train --resume run | data.json: ;;task;;dance
data-json-transform      | ck_text data.json '{"format": "idx", "task": "classification", "input_shape": [784], "outputs": 10, "classes": ["0","1","2","3","4","5","6","7","8","9"], "transform": {"std": 0}}' | train --resume run | data.json: transform.mean: expected a finite number, found nothing
dist-json-broken         | ck_text dist.json '{"processes": "two"}' | train --resume run | dist.json: expected {"processes": N, …}, found {"processes": "two"}
resume-optimizer         | -  | train --resume run --set optim.name=sgd      | --set: optim.name: expected the run's "adamw" on --resume (its checkpoints hold state made for it), found "sgd";;--set model.init_from=;;--set optim.name=sgd
resume-model             | -  | train --resume run --set model.name=deep_mlp | --set: model.name: expected the run's "mlp" on --resume;;found "deep_mlp"
resume-batch-size        | -  | train --resume run --set train.batch_size=32 | train.batch_size: expected 64 examples a step (the checkpoint's run had 64;;found 32;;raise train.accumulate instead;;model.init_from=
resume-train-limit       | -  | train --resume run --set data.train_limit=600 | the training split: expected 640 examples an epoch (the checkpoint's run had 640;;found 600;;data.train_limit;;model.init_from=
resume-old-past-epoch    | ck_text dist.json '{"processes": 1}' | train --resume run --set data.train_limit=64 | its place in the epoch, batch 10, lies past this epoch's 1 batch: the training split is smaller;;model.init_from=
dist-json-processes      | ck_text dist.json '{"processes": 2, "batch_per_process": 64}' | train --resume run | expected 2 processes;;found 1;;torchrun --nproc-per-node=2
dist-world-size          | -  | WORLD_SIZE=two train $T --run-dir new       | environment: WORLD_SIZE: expected an integer in 1..1048576, found "two"
dist-rank                | -  | WORLD_SIZE=2 RANK=2 train $T --run-dir new  | environment: RANK: expected an integer in 0..1, found "2"
dist-no-store            | -  | WORLD_SIZE=2 RANK=0 train $T --run-dir new  | environment: MASTER_ADDR: expected the address of rank 0's store (torchrun sets it), found none
export-damaged           | ck_cut model.safetensors 300 | export run --format torch --out x.pt | model.safetensors: truncated: the header length says
resume-running           | rm -r run/checkpoints; echo "pid $$" > run/.kiln-run; exec 9<run/.kiln-run; flock -n 9 && { sleep 30 & } | train --resume run | run: --resume: expected a stopped run, found one still running (pid
resume-training          | exec 9<run/.kiln-run; flock -n 9 && { sleep 30 & } | train --resume run --set train.epochs=3 | run: --resume: expected a stopped run, found one still running (pid
EOF
}

# run_row N LINE: one row, in $tmp/cases/NAME; its report goes to $tmp/reports/N, and it
# fails when the row does.
run_row() {
  local n="$1" line="$2" name setup args expect c ck gck before after out rc frag trace
  local -a problems=()
  IFS='|' read -r name setup args expect <<<"$line"
  name="${name%% *}"
  c="$tmp/cases/$name"
  exec > "$tmp/reports/$n"
  mkdir "$c" 2>/dev/null || { echo "FAIL $name: the name of another row"; return 1; }
  cp -r "$base/run" "$c/run"
  [[ "$line" != *gpt* ]] || cp -r "$base/gpt" "$c/gpt"
  ck="$c/run/checkpoints/$ckname"; gck="$c/gpt/checkpoints/$gckname"
  if [[ ! "$setup" =~ ^\ *-\ *$ ]] && ! (cd "$c" && eval "$setup") > "$c.setup" 2>&1; then
    echo "FAIL $name: its setup failed:"; cat "$c.setup"; return 1
  fi
  before="$(snapshot "$c")"
  # stderr is the message; what a run would print on stdout goes aside.
  # Leading NAME=VALUE words of the arguments are the process's environment.
  out="$(cd "$c" && eval "set -- $args" && env=() &&
         while [[ $# -gt 0 && "$1" =~ ^[A-Z_]+= ]]; do env+=("$1"); shift; done &&
         env "${env[@]}" timeout 120 "$kiln" "$@" 2>&1 >"$c.stdout")"; rc=$?
  after="$(snapshot "$c")"
  [[ $rc -eq 2 ]] || problems+=("exit code $rc, expected 2")
  [[ $(grep -c "^kiln: error: " <<<"$out") -eq 1 ]] || problems+=("not one 'kiln: error: ' line")
  while [[ -n "$expect" ]]; do  # fragment;;fragment;;…, each trimmed
    frag="${expect%%;;*}"
    [[ "$expect" == *";;"* ]] && expect="${expect#*;;}" || expect=""
    frag="${frag#"${frag%%[! ]*}"}"; frag="${frag%"${frag##*[! ]}"}"
    [[ -z "$frag" || "$out" == *"$frag"* ]] || problems+=("the message lacks: $frag")
  done
  trace="$(grep -hoE "Exception raised from|frame #|terminate called|Aborted|core dumped" - "$c.stdout" <<<"$out" | head -1)"
  [[ -z "$trace" ]] || problems+=("a stack trace or abort: $trace")
  [[ "$before" == "$after" ]] || problems+=("files changed: $(diff <(echo "$before") <(echo "$after") | grep '^[<>]' | head -3 | tr '\n' ' ')")
  if [[ ${#problems[@]} -gt 0 ]]; then
    printf 'FAIL %s: kiln %s\n' "$name" "$(sed -E 's/^ +| +$//g' <<<"$args")"
    printf '  %s\n' "${problems[@]}"
    printf '  stderr: %s\n' "$(head -c 600 <<<"$out")"
    return 1
  fi
  [[ -z "${KILN_BAD_INPUT_VERBOSE:-}" ]] || printf '%-26s %s\n' "$name" "$(head -c 600 <<<"$out")"
}

# The rows run side by side, one per core (KILN_BAD_INPUT_JOBS; each is one short kiln
# process in its own directory); the reports print in the table's order.
mkdir -p "$tmp/reports" "$tmp/cases"
parallel="${KILN_BAD_INPUT_JOBS:-$(nproc)}"
while IFS= read -r line; do
  [[ -z "$line" || "$line" == "#"* ]] && continue
  [[ -n "$only" ]] && ! grep -Eq -- "$only" <<<"${line%%|*}" && continue
  rows=$((rows + 1))
  while [[ $(jobs -rp | wc -l) -ge $parallel ]]; do wait -n; done
  run_row "$rows" "$line" &
done < <(table)
wait
for ((n = 1; n <= rows; n++)); do
  grep -q '^FAIL' "$tmp/reports/$n" && failures=$((failures + 1))
  cat "$tmp/reports/$n"
done

echo "bad input: $((rows - failures)) of $rows rows passed in $SECONDS s"
[[ $rows -ge 1 && $failures -eq 0 ]]
