# Writes and damages the files of tests/app/bad_input_test.sh: data files in each
# format kiln reads, and a checkpoint's files mutated with their manifest entry
# ("bytes", "crc32") rewritten, so that kiln's parsers themselves are reached.
# Standard library only, except `forge_pt`, which needs torch.
# Usage: python bad_input_files.py COMMAND ARGS... (the commands are the functions below)
import gzip
import json
import os
import struct
import sys
import zipfile
import zlib


def reseal(ckpt, *files):
    """Rewrites manifest.json's size and CRC-32 of each file to match the file."""
    path = os.path.join(ckpt, "manifest.json")
    m = json.load(open(path))
    for f in files:
        data = open(os.path.join(ckpt, f), "rb").read()
        m["files"][f] = {"bytes": len(data), "crc32": zlib.crc32(data)}
    json.dump(m, open(path, "w"), indent=2)


def manifest(ckpt, statement):
    """Runs `statement` on the manifest as `m` (a dict) and writes it back."""
    path = os.path.join(ckpt, "manifest.json")
    m = json.load(open(path))
    exec(statement, {"m": m})
    json.dump(m, open(path, "w"), indent=2)


def cut(path, keep):
    """Keeps the first `keep` bytes (negative: drops that many from the end)."""
    data = open(path, "rb").read()
    open(path, "wb").write(data[: int(keep)])


def poke(path, offset, hexbytes):
    """Overwrites bytes at `offset` (negative: from the end) with `hexbytes`."""
    data = bytearray(open(path, "rb").read())
    at = int(offset) % len(data)
    new = bytes.fromhex(hexbytes)
    data[at : at + len(new)] = new
    open(path, "wb").write(bytes(data))


def st_edit(path, statement):
    """Runs `statement` on a safetensors header as `h` (a dict) and writes it back
    with the same data bytes; `n` in the statement replaces the length prefix."""
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    h = json.loads(data[8 : 8 + n])
    scope = {"h": h, "n": None}
    exec(statement, scope)
    text = json.dumps(scope["h"], separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    length = len(text) if scope["n"] is None else scope["n"]
    open(path, "wb").write(struct.pack("<Q", length) + text + data[8 + n :])


def idx(path, *dims):
    """An IDX file of unsigned bytes (gzipped when the name ends in .gz): dims, then
    the data (values i % 10, labels in 0..9)."""
    dims = [int(d) for d in dims]
    count = 1
    for d in dims:
        count *= d
    body = bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims)
    body += bytes(i % 10 for i in range(count))
    (gzip.open if path.endswith(".gz") else open)(path, "wb").write(body)


def npy_bytes(descr, shape, data):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    header += " " * (-(10 + len(header) + 1) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data


def npy(path, descr, shape, fill_hex, count):
    """An .npy file: header with `descr` and `shape` (Python tuple text), then `count`
    copies of the bytes `fill_hex`."""
    open(path, "wb").write(npy_bytes(descr, shape, bytes.fromhex(fill_hex) * int(count)))


def npz(path, *arrays):
    """An .npz of NAME=DESCR:SHAPE:FILL_HEX:COUNT arrays; stored, or deflated when
    the path ends in .deflated.npz."""
    mode = zipfile.ZIP_DEFLATED if path.endswith(".deflated.npz") else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", mode) as z:
        for a in arrays:
            name, spec = a.split("=", 1)
            descr, shape, fill, count = spec.split(":")
            z.writestr(name + ".npy", npy_bytes(descr, shape, bytes.fromhex(fill) * int(count)))


def forge_pt(src, out_dir):
    """trainer.pt with a wrong type, a wrong dtype and a wrong step (torch.save of
    the dict torch.load reads), and a TorchScript archive (the form of kiln's older
    checkpoints) whose code does not compile, written to out_dir."""
    import warnings

    import torch

    warnings.simplefilter("ignore")
    script = os.path.join(out_dir, "script.pt")
    torch.jit.save(torch.jit.script(torch.nn.Module()), script)
    with zipfile.ZipFile(script) as z, zipfile.ZipFile(
        os.path.join(out_dir, "trainer_bad_code.pt"), "w"
    ) as out:
        for entry in z.infolist():
            data = z.read(entry.filename)
            if entry.filename.endswith(".py"):
                data = b"class Module(Module):\n  x : __torch__.Nothing(\n"
            out.writestr(entry.filename, data)

    base = torch.load(src, weights_only=True)
    forged = {
        "trainer_step_text.pt": {**base, "step": "ten"},
        "trainer_rng_float.pt": {**base, "rng_cpu": base["rng_cpu"].float()},
        "trainer_step_11.pt": {**base, "step": base["step"] + 1},
    }
    for name, d in forged.items():
        torch.save(d, os.path.join(out_dir, name))


if __name__ == "__main__":
    globals()[sys.argv[1]](*sys.argv[2:])
