// kiln::torch_pickle: tensors of every dtype and layout (strided, offset, transposed,
// expanded, 0-dim, empty, views of one storage, on a device) and plain values round-trip
// bit for bit in kiln; Python's `torch.load(path, weights_only=True)` reads kiln's files
// the same, and kiln reads what Python's torch.save writes; bad files and values are
// refused naming the file or the value; torch::serialize archives go through .pt files
// as data only: a TorchScript archive is refused, never compiled.
#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "fake_device.h"
#include "support.h"
#include "util/error.h"
#include "util/files.h"
#include "util/safetensors.h"
#include "util/torch_archive.h"
#include "util/torch_pickle.h"

namespace tp = kiln::torch_pickle;
using Catch::Matchers::Contains;

namespace {

// Tensors that exercise every part of the format, by name. Values are raw bits where it
// matters: -0.0 and a NaN must come back as the same bytes.
std::vector<std::pair<std::string, at::Tensor>> awkward_tensors() {
  torch::manual_seed(3);
  auto f = at::randn({3, 4});
  f[0][0] = -0.0;
  f[0][1] = std::numeric_limits<float>::quiet_NaN();
  const auto base = at::randn({10});
  return {
      {"float", f},
      {"transposed", at::randn({4, 3}).t()},
      {"offset", at::arange(20, at::kInt).narrow(0, 3, 10)},
      {"strided", at::randn({6, 8}).slice(0, 0, 6, 2).slice(1, 1, 8, 3)},
      {"expanded", at::randn({3, 1}).expand({3, 4})},
      {"view_a", base.narrow(0, 0, 5)},
      {"view_b", base.narrow(0, 4, 6)},  // overlaps view_a: one storage, written once
      {"scalar", at::scalar_tensor(2.5, at::kDouble)},
      {"long_scalar", at::scalar_tensor(int64_t{1} << 60, at::kLong)},
      {"empty", at::empty({0, 3})},
      {"bf16", at::randn({2, 5}).to(at::kBFloat16)},
      {"half", at::randn({7}).to(at::kHalf)},
      {"bool", at::rand({2, 3}) > 0.5},
      {"uint8", at::randint(0, 256, {4}, at::kByte)},
      {"int8", at::randint(-128, 128, {4}, at::kChar)},
      {"int16", at::randint(-30000, 30000, {4}, at::kShort)},
      {"int64", at::randint(-(int64_t{1} << 62), int64_t{1} << 62, {2, 2}, at::kLong)},
      {"double", at::randn({3}, at::kDouble)},
  };
}

c10::Dict<std::string, at::Tensor> dict_of(const std::vector<std::pair<std::string, at::Tensor>>& ts) {
  c10::Dict<std::string, at::Tensor> d;
  for (const auto& [name, t] : ts) d.insert(name, t);
  return d;
}

std::string bytes_of(const at::Tensor& t) {
  const auto c = t.cpu().contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

// dtype, sizes, strides, storage offset and every element's bytes.
void require_identical(const at::Tensor& got, const at::Tensor& want) {
  REQUIRE(got.device().is_cpu());
  REQUIRE(got.scalar_type() == want.scalar_type());
  REQUIRE(got.sizes() == want.sizes());
  REQUIRE(got.strides() == want.strides());
  REQUIRE(got.storage_offset() == want.storage_offset());
  REQUIRE(bytes_of(got) == bytes_of(want));
}

// `value` (a str-keyed dict of tensors) checked against `want`, name by name.
void require_tensors(const c10::IValue& value, const std::vector<std::pair<std::string, at::Tensor>>& want) {
  REQUIRE(value.isGenericDict());
  const auto d = value.toGenericDict();
  REQUIRE(d.size() == want.size());
  for (const auto& [name, t] : want) {
    INFO(name);
    REQUIRE(d.contains(name));
    require_identical(d.at(name).toTensor(), t);
  }
  const auto a = d.at("view_a").toTensor(), b = d.at("view_b").toTensor();
  REQUIRE(a.storage().is_alias_of(b.storage()));
}

std::string error_of(const std::function<void()>& f) {
  return kiln::test::input_error_of(f);
}

}  // namespace

TEST_CASE("a .pt file round-trips tensors bit for bit, views of one storage still one storage",
          "[util][torch_pickle]") {
  const auto tensors = awkward_tensors();
  require_tensors(tp::deserialize(tp::serialize(dict_of(tensors)), "mem"), tensors);
}

TEST_CASE("a .pt file round-trips plain values nested in lists, tuples and dicts",
          "[util][torch_pickle]") {
  c10::impl::GenericDict inner(c10::IntType::get(), c10::AnyType::get());
  inner.insert(int64_t{3}, std::string("three"));
  c10::impl::GenericDict v(c10::StringType::get(), c10::AnyType::get());
  v.insert("step", int64_t{7});
  v.insert("big", int64_t{1} << 40);
  v.insert("lr", 0.5);
  v.insert("on", true);
  v.insert("name", std::string("adamw"));
  v.insert("none", c10::IValue());
  v.insert("sizes", c10::List<int64_t>({1, 2, 3}));
  v.insert("betas", c10::List<double>({0.9, 0.999}));
  v.insert("flags", c10::List<bool>({true, false}));
  v.insert("pair", c10::ivalue::Tuple::create({int64_t{1}, std::string("a")}));
  v.insert("inner", inner);
  v.insert("states", c10::List<at::Tensor>({at::ones({2}), at::zeros({}, at::kLong)}));

  const auto back = tp::deserialize(tp::serialize(v), "mem").toGenericDict();
  REQUIRE(back.size() == v.size());
  REQUIRE(back.at("step").toInt() == 7);
  REQUIRE(back.at("big").toInt() == int64_t{1} << 40);
  REQUIRE(back.at("lr").toDouble() == 0.5);
  REQUIRE(back.at("on").toBool());
  REQUIRE(back.at("name").toStringRef() == "adamw");
  REQUIRE(back.at("none").isNone());
  const auto ints = back.at("sizes").toListRef();
  REQUIRE((ints.size() == 3 && ints[0].toInt() == 1 && ints[2].toInt() == 3));
  const auto doubles = back.at("betas").toListRef();
  REQUIRE((doubles.size() == 2 && doubles[1].toDouble() == 0.999));
  const auto bools = back.at("flags").toListRef();
  REQUIRE((bools.size() == 2 && bools[0].toBool() && !bools[1].toBool()));
  const auto& pair = back.at("pair").toTupleRef().elements();
  REQUIRE((pair.size() == 2 && pair[0].toInt() == 1 && pair[1].toStringRef() == "a"));
  REQUIRE(back.at("inner").toGenericDict().at(int64_t{3}).toStringRef() == "three");
  const auto states = back.at("states").toListRef();
  REQUIRE(states.size() == 2);
  require_identical(states[0].toTensor(), at::ones({2}));
  require_identical(states[1].toTensor(), at::zeros({}, at::kLong));
}

TEST_CASE("device tensors are written as CPU tensors, views kept views", "[util][torch_pickle][fake]") {
  // Each CPU tensor's whole storage moved to the device once, the same view taken of it.
  const auto cpu = awkward_tensors();
  std::map<const void*, at::Tensor> moved;
  std::vector<std::pair<std::string, at::Tensor>> on_device;
  for (const auto& [name, t] : cpu) {
    auto& whole = moved[t.storage().unsafeGetStorageImpl()];
    if (!whole.defined()) whole = at::empty({0}, t.options()).set_(t.storage()).to(kiln::test::fake_device());
    on_device.emplace_back(name, whole.as_strided(t.sizes(), t.strides(), t.storage_offset()));
  }
  REQUIRE(on_device.front().second.device() == kiln::test::fake_device());
  require_tensors(tp::deserialize(tp::serialize(dict_of(on_device)), "mem"), cpu);
}

TEST_CASE("values torch.load cannot read back are refused naming them", "[util][torch_pickle]") {
  const auto x = at::ones({4});
  c10::Dict<std::string, at::Tensor> twice;
  twice.insert("f", x);
  twice.insert("i", x.view(at::kInt));
  REQUIRE_THROWS_WITH(tp::serialize(twice),
                      Contains("value['i'] (Int) shares its storage with value['f'] (Float)"));
  REQUIRE_THROWS_WITH(tp::serialize(at::ones({2}, at::kComplexFloat)),
                      Contains("value: expected bool, uint8") && Contains("got ComplexFloat"));
  c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
  d.insert("dev", c10::Device(at::kCPU));
  REQUIRE_THROWS_WITH(tp::serialize(d), Contains("value['dev']: expected a tensor, None") &&
                                            Contains("got a Device"));
  REQUIRE_THROWS_WITH(tp::serialize(x, {{"data.pkl", "x"}}), Contains("record 'data.pkl'"));
}

TEST_CASE("save_file replaces a file whole, records ride along, bad files are refused naming them",
          "[util][torch_pickle]") {
  kiln::test::TempDir dir;
  const auto path = dir / "m.pt";
  tp::save_file(path, at::zeros({3}));
  tp::save_file(path, dict_of({{"w", at::ones({2})}}), {{"kiln_data.json", R"({"mean": 0.5})"}});
  REQUIRE(std::distance(std::filesystem::directory_iterator(dir.path()),
                        std::filesystem::directory_iterator()) == 1);  // no temporary left
  require_identical(tp::load_file(path).toGenericDict().at("w").toTensor(), at::ones({2}));
  REQUIRE(tp::read_record(path, "kiln_data.json") == R"({"mean": 0.5})");
  REQUIRE(!tp::read_record(path, "other.json"));

  REQUIRE_THAT(error_of([&] { tp::load_file(dir / "none.pt"); }),
               Contains(dir / "none.pt") && Contains("cannot read the file"));
  kiln::files::write_synced(dir / "text.pt", "not a zip archive");
  REQUIRE_THAT(error_of([&] { tp::load_file(dir / "text.pt"); }),
               Contains(dir / "text.pt" + ": expected a .pt file (torch.save's zip format)"));
  const std::string whole = kiln::files::read(path);
  kiln::files::write_synced(dir / "cut.pt", whole.substr(0, whole.size() / 2));
  REQUIRE_THAT(error_of([&] { tp::load_file(dir / "cut.pt"); }),
               Contains(dir / "cut.pt" + ": expected a .pt file"));
}

namespace {

// An archive as optimizers and schedulers write one: plain values, tensors (a
// parameter, a buffer), nested archives.
void fill_archive(torch::serialize::OutputArchive& ar) {
  ar.write("kind", c10::IValue(std::string("adamw")));
  ar.write("step", c10::IValue(int64_t{1} << 40));
  ar.write("lr", c10::IValue(1e-3));
  ar.write("on", c10::IValue(true));
  ar.write("sizes", c10::IValue(c10::List<int64_t>({3, 4})));
  ar.write("betas", c10::IValue(std::make_tuple(0.9, 0.999)));
  ar.write("exp_avg", at::arange(6, at::kFloat).reshape({2, 3}));
  ar.write("rng", at::arange(5, at::kByte), /*is_buffer=*/true);
  torch::serialize::OutputArchive inner(ar.compilation_unit()), innermost(ar.compilation_unit());
  innermost.write("deep", c10::IValue(int64_t{7}));
  inner.write("innermost", innermost);
  inner.write("scale", c10::IValue(65536.0));
  ar.write("inner", inner);
}

void require_archive(torch::serialize::InputArchive& ar) {
  auto keys = ar.keys();
  std::sort(keys.begin(), keys.end());
  REQUIRE(keys == std::vector<std::string>{"betas", "exp_avg", "inner", "kind", "lr", "on", "rng",
                                           "sizes", "step"});
  c10::IValue v;
  ar.read("kind", v);
  REQUIRE(v.toStringRef() == "adamw");
  ar.read("step", v);
  REQUIRE(v.toInt() == int64_t{1} << 40);
  ar.read("lr", v);
  REQUIRE(v.toDouble() == 1e-3);
  ar.read("on", v);
  REQUIRE(v.toBool());
  ar.read("sizes", v);
  REQUIRE(v.toIntVector() == std::vector<int64_t>{3, 4});
  ar.read("betas", v);
  REQUIRE(v.toTupleRef().elements()[1].toDouble() == 0.999);
  at::Tensor t;
  ar.read("exp_avg", t);
  require_identical(t, at::arange(6, at::kFloat).reshape({2, 3}));
  at::Tensor rng;
  ar.read("rng", rng, /*is_buffer=*/true);
  require_identical(rng, at::arange(5, at::kByte));
  torch::serialize::InputArchive inner, innermost;
  ar.read("inner", inner);
  inner.read("scale", v);
  REQUIRE(v.toDouble() == 65536.0);
  inner.read("innermost", innermost);
  innermost.read("deep", v);
  REQUIRE(v.toInt() == 7);
}

}  // namespace

TEST_CASE("an archive goes through a .pt file and comes back whole; TorchScript archives are refused",
          "[util][torch_pickle]") {
  torch::serialize::OutputArchive out;
  fill_archive(out);
  const std::string pt = tp::serialize_archive(out);
  const auto dict = tp::deserialize(pt, "mem").toGenericDict();  // what torch.load sees
  REQUIRE(dict.at("inner").toGenericDict().at("innermost").toGenericDict().at("deep").toInt() == 7);
  torch::serialize::InputArchive back;
  tp::load_archive(back, pt, "mem.pt");
  require_archive(back);

  // Loading compiles nothing: keys no code could name (a Python keyword, spaces, bytes
  // that are not UTF-8) load as they are. Through TorchScript's importer they were
  // compiler errors ("expected a valid token"), which is how the mutation test found it.
  c10::impl::GenericDict odd(c10::StringType::get(), c10::AnyType::get());
  odd.insert("def", c10::IValue(int64_t{1}));
  odd.insert("two words", c10::IValue(2.5));
  odd.insert(std::string("st\x80\x1b[31mep"), at::arange(3, at::kFloat));
  torch::serialize::InputArchive odd_back;
  tp::load_archive(odd_back, tp::serialize(odd), "odd.pt");
  c10::IValue v;
  odd_back.read("def", v);
  REQUIRE(v.toInt() == 1);
  odd_back.read("two words", v);
  REQUIRE(v.toDouble() == 2.5);
  at::Tensor t;
  odd_back.read(std::string("st\x80\x1b[31mep"), t);
  require_identical(t, at::arange(3, at::kFloat));

  torch::serialize::OutputArchive old;  // what kiln's checkpoints held before 2026-11-30
  fill_archive(old);
  std::ostringstream script;
  old.save_to(script);
  torch::serialize::InputArchive from_script;
  REQUIRE_THAT(error_of([&] { tp::load_archive(from_script, script.str(), "old.pt"); }),
               Contains("old.pt: expected a data-only .pt file (a dict of tensors and plain values), "
                        "found a TorchScript archive"));
  REQUIRE(from_script.keys().empty());

  torch::serialize::InputArchive bad;
  REQUIRE_THAT(error_of([&] { tp::load_archive(bad, "not an archive", "bad.pt"); }),
               Contains("bad.pt: expected a .pt file"));
  REQUIRE_THAT(error_of([&] { tp::load_archive(bad, tp::serialize(at::ones({1})), "tensor.pt"); }),
               Contains("tensor.pt: not a readable archive (expected a dict (an archive), found a Tensor"));
}

TEST_CASE("a pickle whose opcodes declare more bytes than it holds is refused before libtorch "
          "reads it", "[util][torch_pickle]") {
  // The fuzzer's find: libtorch's Unpickler reserved a declared string length (here
  // 2^31-1 and 2^64-1) before reading it, an allocation of gigabytes from a few bytes.
  const auto pt = [](const std::string& pickle) {
    std::string out;
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* p, size_t n) {
      out.append(static_cast<const char*>(p), n);
      return n;
    });
    writer.writeRecord("data.pkl", pickle.data(), pickle.size());
    writer.writeRecord("byteorder", "little", 6);
    writer.writeEndOfFile();
    return out;
  };
  REQUIRE_THAT(error_of([&] { tp::deserialize(pt(std::string("\x80\x02X\xff\xff\xff\x7f" "abc.", 11)), "x.pt"); }),
               Contains("x.pt: data.pkl: byte 2: opcode 0x58 declares 2147483647 bytes of data, the "
                        "pickle has 4 left"));
  REQUIRE_THAT(error_of([&] { tp::deserialize(pt(std::string("\x80\x02\x8d\xff\xff\xff\xff\xff\xff\xff\xff.", 12)), "y.pt"); }),
               Contains("y.pt: data.pkl: byte 2: opcode 0x8d declares 18446744073709551615 bytes"));
  REQUIRE_THAT(error_of([&] { tp::deserialize(pt(std::string("\x80\x02}", 3)), "z.pt"); }),
               Contains("z.pt: data.pkl: byte 3: expected the STOP opcode, found the end of the pickle"));
  REQUIRE_THAT(error_of([&] { tp::deserialize(pt(std::string("\x80\x02\xff.", 4)), "w.pt"); }),
               Contains("w.pt: data.pkl: byte 2: expected a pickle opcode, found 0xff"));
  // The second find: a memo index far past the memo's end, which the Unpickler's memo
  // vector grew to (2^30 entries: 10 GB); the next index and an existing one are fine.
  REQUIRE_THAT(error_of([&] { tp::deserialize(pt(std::string("\x80\x02Nr\x00\x00\x00\x40.", 9)), "m.pt"); }),
               Contains("m.pt: data.pkl: byte 3: a memo index of 1073741824 where the memo holds 0 "
                        "entries; expected at most 0 (the next entry)"));
  REQUIRE_THAT(error_of([&] { tp::deserialize(pt(std::string("\x80\x02Nq\x00q\x02.", 8)), "n.pt"); }),
               Contains("n.pt: data.pkl: byte 5: a memo index of 2 where the memo holds 1 entries"));
  REQUIRE(tp::deserialize(pt(std::string("\x80\x02X\x01\x00\x00\x00" "aq\x00q\x00.", 13)), "memo.pt")
              .toStringRef() == "a");
  // What kiln and torch.save write still reads.
  REQUIRE(tp::deserialize(pt(std::string("\x80\x02X\x03\x00\x00\x00" "abc.", 11)), "ok.pt").toStringRef() == "abc");
}

TEST_CASE("a record whose zip entry declares more bytes than the file holds is refused before "
          "libtorch allocates them", "[util][torch_pickle]") {
  // The checkpoint fuzzer's find: libtorch's getRecord allocated the size the zip's central
  // directory declares (4 GiB, from a 3 KB trainer.pt) before reading the record.
  const std::string good = tp::serialize(c10::IValue(int64_t{7}));
  REQUIRE(tp::deserialize(good, "good.pt").toInt() == 7);
  // 0xffffffff in both sizes, as the fuzzer wrote: zip64's marker, which miniz's own check
  // of the directory lets through (a smaller size past the end it refuses itself).
  for (const uint32_t declared : {0xffffffffu}) {
    std::string bad = good;
    // The central directory entry of archive/data.pkl: signature PK\1\2, the compressed
    // size at byte 20 of the entry, the uncompressed size at 24, the name at 46.
    size_t at = 0;
    while ((at = bad.find("PK\x01\x02", at)) != std::string::npos &&
           bad.compare(at + 46, 16, "archive/data.pkl") != 0)
      ++at;
    REQUIRE(at != std::string::npos);
    for (const size_t field : {20, 24})
      for (int b = 0; b < 4; ++b) bad[at + field + b] = static_cast<char>((declared >> (8 * b)) & 0xff);
    INFO("declared " << declared);
    REQUIRE_THAT(error_of([&] { tp::deserialize(bad, "big.pt"); }),
                 Contains("big.pt: record 'data.pkl' declares " + std::to_string(declared) + " bytes at byte ") &&
                     Contains("past the end of the file's " + std::to_string(bad.size()) + " bytes"));
  }
}

TEST_CASE("torch.load(weights_only=True) reads kiln's .pt bit for bit, and kiln reads torch.save's",
          "[util][torch_pickle][interop]") {
  const auto py = kiln::test::python_or_skip("torch, safetensors.torch");
  if (!py) return;
  kiln::test::TempDir dir;
  const auto tensors = awkward_tensors();
  c10::impl::GenericDict meta(c10::StringType::get(), c10::AnyType::get());
  meta.insert("step", int64_t{7});
  meta.insert("lr", 0.5);
  meta.insert("name", std::string("x"));
  meta.insert("flags", c10::List<bool>({true, false}));
  meta.insert("sizes", c10::List<int64_t>({1, 2, 3}));
  meta.insert("none", c10::IValue());
  meta.insert("pair", c10::ivalue::Tuple::create({int64_t{1}, std::string("a")}));
  c10::impl::GenericDict all(c10::StringType::get(), c10::AnyType::get());
  all.insert("tensors", dict_of(tensors));
  all.insert("meta", meta);
  tp::save_file(dir / "k.pt", all, {{"kiln_data.json", R"({"mean": 0.5})"}});
  torch::serialize::OutputArchive archive;
  fill_archive(archive);
  kiln::files::write_synced(dir / "archive.pt", tp::serialize_archive(archive));

  std::ofstream(dir / "check.py") << R"(import json, sys, zipfile
import torch
from safetensors.torch import save_file
d = sys.argv[1]
x = torch.load(d + "/k.pt", weights_only=True)  # the default since torch 2.6, spelled out
assert x["meta"] == {"step": 7, "lr": 0.5, "name": "x", "flags": [True, False],
                     "sizes": [1, 2, 3], "none": None, "pair": (1, "a")}, x["meta"]
t = x["tensors"]
assert t["transposed"].stride() == (1, 3) and t["offset"].storage_offset() == 3
assert t["expanded"].stride() == (1, 0) and t["scalar"].dim() == 0
assert t["view_a"].untyped_storage().data_ptr() == t["view_b"].untyped_storage().data_ptr()
assert t["bf16"].dtype == torch.bfloat16 and t["bool"].dtype == torch.bool
with zipfile.ZipFile(d + "/k.pt") as z:
    [name] = [n for n in z.namelist() if n.endswith("/kiln_data.json")]
    assert json.loads(z.read(name)) == {"mean": 0.5}
a = torch.load(d + "/archive.pt", weights_only=True)
assert a["inner"] == {"innermost": {"deep": 7}, "scale": 65536.0}, a
assert a["betas"] == (0.9, 0.999) and a["sizes"] == [3, 4] and a["step"] == 1 << 40
assert torch.equal(a["exp_avg"], torch.arange(6.0).reshape(2, 3))
torch.save(t, d + "/p.pt")  # Python's writer: kiln compares what it reads with its originals
torch.manual_seed(0)
sd = torch.nn.Linear(3, 2).state_dict()
torch.save(dict(sd), d + "/dict.pt")  # a module's weights as a plain dict
torch.save(sd, d + "/state_dict.pt")  # an OrderedDict with _metadata: libtorch's reader has no OrderedDict
save_file(sd, d + "/dict.safetensors")
)";
  const std::string cmd = *py + " " + (dir / "check.py") + " " + dir.path();
  REQUIRE(std::system(cmd.c_str()) == 0);

  require_tensors(tp::load_file(dir / "p.pt"), tensors);
  const auto sd = tp::load_file(dir / "dict.pt");
  const auto want = kiln::safetensors::load_file(dir / "dict.safetensors").tensors;
  REQUIRE(sd.isGenericDict());
  REQUIRE(sd.toGenericDict().size() == want.size());
  for (const auto& [name, t] : want) {
    INFO(name);
    require_identical(sd.toGenericDict().at(name).toTensor(), t);
  }
  REQUIRE_THAT(error_of([&] { tp::load_file(dir / "state_dict.pt"); }),
               Contains(dir / "state_dict.pt" + ": expected a .pt file"));
}
