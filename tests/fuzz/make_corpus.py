"""Writes tests/fuzz/corpus/<target>/: the seed inputs of each fuzz target (small real
files in each format, several written by kiln itself), each with the target's leading
selector byte where it has one (see the target's .cpp). Run with the torch wheel's
Python (numpy, safetensors): python tests/fuzz/make_corpus.py [KILN_FUZZ_BUILD_DIR]
The checkpoint seeds come from fuzz_checkpoint itself (KILN_FUZZ_WRITE_SEEDS), so they
are files kiln wrote for the very model the target loads into."""
import gzip, io, os, struct, subprocess, sys, zipfile
from pathlib import Path

import numpy as np
from safetensors.numpy import save as st_save

root = Path(__file__).resolve().parent / "corpus"
build = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "build-fuzz"


def put(target, name, data):
    d = root / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


def idx(a):
    a = np.asarray(a, dtype=np.uint8)
    return bytes([0, 0, 8, a.ndim]) + b"".join(struct.pack(">I", n) for n in a.shape) + a.tobytes()


rng = np.random.default_rng(0)
images = idx(rng.integers(0, 256, (3, 4, 4)))
labels = idx(np.array([1, 0, 9]))
put("idx", "images_plain", b"\x00" + images)
put("idx", "labels_plain", b"\x00" + labels)
put("idx", "images_gz_file", b"\x00" + gzip.compress(images))
put("idx", "images_gzipped_by_target", b"\x01" + images)
put("idx", "rank4", b"\x01" + idx(rng.integers(0, 256, (2, 1, 2, 3))))

put("safetensors", "numpy_dtypes", st_save({
    "f32": np.arange(6, dtype=np.float32).reshape(2, 3), "f16": np.ones(3, np.float16),
    "i64": np.array([1, -2], np.int64), "u8": np.zeros((2, 2), np.uint8), "b": np.array([True])},
    metadata={"format": "pt", "kiln.data": "{}"}))
put("safetensors", "empty_tensor", st_save({"e": np.zeros((0, 3), np.float32)}))

for name, text in {
    "numeric": "a,b,label\n1,2.5,x\n3,-4e2,y\n5,6,x\n7,8,y\n",
    "categorical": "colour,size,price\nred,1,10.5\nblue,2,20\nred,3,\ngreen,,7\n",
    "quoted": 'name,"note, with comma",y\n"a ""b""",1,0\nc,"line\nbreak",1\nd,2,0\ne,3,1\n',
    "crlf_bom": "\ufeffx,y\r\n1,0\r\n2,1\r\n3,0\r\n4,1\r\n",
    "missing": "x1,x2,t\nNA,1,0.5\n2,N/A,1.5\n3,4,null\n5,6,2\n",
}.items():
    put("csv", name, b"\x00" + text.encode())
put("csv", "semicolon", b"\x01" + b"a;b;c\n1;2;3\n4;5;6\n7;8;9\n")
put("csv", "tab_regression", b"\x42" + b"a\tb\tc\n1\t2\t3.5\n4\t5\t6.25\n7\t8\t9\n")


def npy(a):
    f = io.BytesIO()
    np.save(f, a)
    return f.getvalue()


for name, a in {"f32_2d": np.arange(12, dtype=np.float32).reshape(3, 4), "i64": np.array([3, 1, 2]),
                "u8_3d": np.zeros((2, 2, 2), np.uint8), "f64_fortran": np.asfortranarray(np.ones((2, 3))),
                "big_endian": np.arange(4, dtype=">i4"), "bool": np.array([True, False]),
                "unicode": np.array(["setosa", "virginica", "caf\u00e9"]), "bytes": np.array([b"ab", b"c"]),
                "unicode_fortran": np.asfortranarray(np.array([["a", "bc"], ["d", "e"]])),
                "unicode_big_endian": np.array(["x", "yz"], dtype=">U2")}.items():
    put("npy", name, b"\x00" + npy(a))
for name, compression in {"stored": zipfile.ZIP_STORED, "deflated": zipfile.ZIP_DEFLATED}.items():
    f = io.BytesIO()
    with zipfile.ZipFile(f, "w", compression) as z:
        z.writestr("x.npy", npy(np.arange(6, dtype=np.float32).reshape(3, 2)))
        z.writestr("y.npy", npy(np.array([0, 1, 0])))
    put("npy", "npz_" + name, b"\x01" + f.getvalue())

for name, text in {"ascii": "to be or not to be, that is the question\n" * 3,
                   "utf8": "naïve café — 日本語のテキスト 🙂\nzweite Zeile\n",
                   "bom": "\ufeffhello\nworld\n", "short": "ab"}.items():
    for pick in (0, 0x35, 0x4b, 0x81):
        put("text", f"{name}_{pick:02x}", bytes([pick]) + text.encode())

configs = Path(__file__).resolve().parents[2] / "configs"
for c in sorted(configs.glob("*.toml")):
    put("config", c.stem, c.read_bytes())
put("config", "overrides", (configs / "tiny.toml").read_bytes() +
    b"\n%%\noptim.lr=0.01\nmodel.hidden=[8,4]\ntrain.device=cpu\n")
put("config", "empty_with_overrides", b"\n%%\nrun.name=x\ndata.format=csv\n")

seeds = root / "checkpoint"
seeds.mkdir(parents=True, exist_ok=True)
env = dict(os.environ, KILN_FUZZ_WRITE_SEEDS=str(seeds))
subprocess.run([str(build / "fuzz_checkpoint"), "-runs=0"], env=env, check=True,
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print("corpus written to", root)
