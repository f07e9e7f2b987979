// Text corpora: read_text joins a folder's files in sorted order and refuses bad UTF-8
// naming the file, byte, line and column; both vocabularies encode and decode back and
// survive JSON; make_windows gives the windows and both kinds of targets as views.
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "data/dataset.h"
#include "data/loader.h"
#include "data/text.h"
#include "fake_device.h"
#include "support.h"
#include "util/error.h"
#include "util/files.h"

using kiln::data::Vocabulary;

namespace {

std::string text_error(const std::string& path) {
  return kiln::test::input_error_of([&] { kiln::data::read_text(path); });
}

std::string json_error(const nlohmann::json& j) {
  return kiln::test::input_error_of([&] { Vocabulary::from_json(j, "run/vocab.json"); });
}

// The vocabulary's code points as numbers (Catch cannot print char32_t).
std::vector<uint32_t> codes(const Vocabulary& v) {
  return {v.characters().begin(), v.characters().end()};
}

}  // namespace

TEST_CASE("read_text joins a folder's files in sorted path order, skipping hidden ones",
          "[data][text]") {
  kiln::test::TempDir dir;
  const auto corpus = dir / "corpus";
  for (const auto* sub : {"/sub", "/a", "/.git", "/empty"})
    std::filesystem::create_directories(corpus + sub);
  kiln::files::write_synced(corpus + "/b.txt", "beta\n");
  kiln::files::write_synced(corpus + "/a.txt", "\xEF\xBB\xBF" "alpha");  // BOM dropped
  kiln::files::write_synced(corpus + "/a/z.txt", "zeta");  // "a.txt" < "a/z.txt": '.' < '/'
  kiln::files::write_synced(corpus + "/sub/c.txt", "gamma");
  kiln::files::write_synced(corpus + "/sub/d.txt", "");  // adds nothing, not even a '\n'
  kiln::files::write_synced(corpus + "/sub/e.txt", "épsilon\n");
  kiln::files::write_synced(corpus + "/.hidden.txt", "hidden");
  kiln::files::write_synced(corpus + "/.git/HEAD", "\xFF not text");
  REQUIRE(kiln::data::read_text(corpus) == "alpha\nzeta\nbeta\ngamma\népsilon\n");
  REQUIRE(kiln::data::read_text(corpus + "/a/z.txt") == "zeta");

  REQUIRE_THAT(text_error(corpus + "/sub/d.txt"),
               Catch::Contains("d.txt: empty corpus: the file holds no text"));
  REQUIRE_THAT(text_error(corpus + "/empty"),
               Catch::Contains("empty: no files in this folder (hidden ones are skipped)"));
  kiln::files::write_synced(corpus + "/empty/x.txt", "\xEF\xBB\xBF");
  REQUIRE_THAT(text_error(corpus + "/empty"),
               Catch::Contains("empty: empty corpus: the 1 file in this folder holds no text"));
  REQUIRE_THAT(text_error(dir / "nothing"), Catch::Contains("nothing: no such file or folder"));
}

TEST_CASE("read_text refuses text that is not UTF-8, naming file, byte, line and column",
          "[data][text]") {
  kiln::test::TempDir dir;
  std::filesystem::create_directories(dir / "c");
  const auto path = dir / "c/bad.txt";
  kiln::files::write_synced(dir / "c/a.txt", "fine\n");
  const auto with = [&](const std::string& bytes) {
    kiln::files::write_synced(path, bytes);
    return text_error(dir / "c");  // the folder: the message names the file inside it
  };
  const std::pair<std::string, std::string> cases[] = {
      {"ab\ncd\xC0\xAF", "byte 5 (line 2, column 3): bytes C0: an overlong encoding (0xC0/0xC1"},
      {"\xE0\x80\x80", "byte 0 (line 1, column 1): bytes E0 80 80: an overlong encoding (a longer"},
      {"x\xF0\x80\x80\x80", "byte 1 (line 1, column 2): bytes F0 80 80 80: an overlong encoding"},
      {"\xED\xA0\x80", "bytes ED A0 80: a UTF-16 surrogate (U+D800..U+DFFF), not a character"},
      {"\xF4\x90\x80\x80", "bytes F4 90 80 80: a code point above U+10FFFF"},
      {"\xF5\x80", "bytes F5: a lead byte for a code point above U+10FFFF"},
      {"\xFF", "bytes FF: a byte that never appears in UTF-8 (0xF8..0xFF)"},
      {"a\n\n\x80", "byte 3 (line 3, column 1): bytes 80: a continuation byte (0x80..0xBF) with "
                    "no lead byte before it"},
      {"\xE2\x82", "bytes E2 82: a truncated sequence: the text ends inside it"},
      {"\xE2\x82" "A", "bytes E2 82: a truncated sequence: a lead byte without all its"},
      // Columns count characters: é and € are one column each.
      {"\xC3\xA9\xE2\x82\xACx\xFF", "byte 6 (line 1, column 4): bytes FF"},
  };
  for (const auto& [bytes, expected] : cases) {
    INFO(expected);
    REQUIRE_THAT(with(bytes),
                 Catch::Contains(path + ": invalid UTF-8 at byte") && Catch::Contains(expected));
  }
  // Every well-formed boundary passes: U+007F, U+0080, U+07FF, U+0800, U+D7FF, U+E000,
  // U+FFFF, U+10000, U+10FFFF.
  const std::string edges =
      "\x7F\xC2\x80\xDF\xBF\xE0\xA0\x80\xED\x9F\xBF\xEE\x80\x80\xEF\xBF\xBF\xF0\x90\x80\x80"
      "\xF4\x8F\xBF\xBF";
  kiln::files::write_synced(path, edges);
  REQUIRE(kiln::data::read_text(path) == edges);
  REQUIRE(codes(Vocabulary::characters(edges)) == std::vector<uint32_t>{0x7F, 0x80, 0x7FF, 0x800,
                                                                        0xD7FF, 0xE000, 0xFFFF,
                                                                        0x10000, 0x10FFFF});
}

TEST_CASE("both vocabularies encode and decode back, and refuse what they cannot encode",
          "[data][text]") {
  const std::string text = "hello wörld\n€ 𝄞";
  const auto chars = Vocabulary::characters(text);
  REQUIRE(chars.kind() == Vocabulary::Kind::kCharacters);
  REQUIRE(codes(chars) == std::vector<uint32_t>{'\n', ' ', 'd', 'e', 'h', 'l', 'o', 'r', 'w', 0xF6,
                                                0x20AC, 0x1D11E});
  REQUIRE(chars.size() == 12);
  const auto ids = chars.encode(text);
  REQUIRE(ids.scalar_type() == at::kLong);
  REQUIRE(ids.numel() == 15);  // characters, not bytes
  REQUIRE(torch::equal(ids.narrow(0, 0, 5), torch::tensor({4, 3, 5, 5, 6}, at::kLong)));
  REQUIRE(ids[14].item<int64_t>() == 11);
  REQUIRE(chars.decode(ids) == text);
  REQUIRE(chars.decode(ids.to(at::kInt)) == text);
  {  // one id at a time, as kiln sample streams them
    std::string streamed;
    for (int64_t k = 0; k < ids.numel(); ++k) streamed += chars.token_text(ids[k].item<int64_t>());
    REQUIRE(streamed == text);
    REQUIRE_THROWS_WITH(chars.token_text(chars.size()), Catch::Contains("is outside [0, "));
  }
  REQUIRE_THROWS_WITH(
      chars.encode("held\nnow é"),
      Catch::Contains("text: byte 5 (line 2, column 1): character U+006E 'n' is not "
                      "in the vocabulary of 12 characters"));
  REQUIRE_THROWS_WITH(chars.encode("\t"),
                      Catch::Contains("character U+0009 is not in the vocabulary"));
  REQUIRE_THROWS_WITH(chars.encode("lo\xC3"), Catch::Contains("text: invalid UTF-8 at byte 2"));
  REQUIRE_THROWS_AS(chars.decode(torch::tensor({12}, at::kLong)), c10::Error);
  REQUIRE_THROWS_WITH(Vocabulary::characters(""), Catch::Contains("text: empty"));

  const auto bytes = Vocabulary::bytes();
  REQUIRE(bytes.size() == 256);
  const auto b = bytes.encode(text);
  REQUIRE(b.numel() == static_cast<int64_t>(text.size()));
  REQUIRE(b[7].item<int64_t>() == 0xC3);  // ö's first byte
  REQUIRE(bytes.decode(b) == text);
  REQUIRE(bytes.decode(b.narrow(0, 0, 8)) == "hello w\xC3");  // cut mid-character, as it is
  std::string streamed;  // a byte at a time: the characters come together again
  for (int64_t k = 0; k < b.numel(); ++k) streamed += bytes.token_text(b[k].item<int64_t>());
  REQUIRE(streamed == text);
  REQUIRE_THROWS_AS(bytes.decode(torch::tensor({256}, at::kLong)), c10::Error);
}

TEST_CASE("a vocabulary survives JSON, and from_json refuses a bad one naming the field",
          "[data][text]") {
  const auto chars = Vocabulary::characters("ba\n€a");
  const auto j = chars.to_json();
  REQUIRE(j.dump() == R"({"characters":"\nab€","size":4,"type":"characters"})");
  REQUIRE(Vocabulary::from_json(nlohmann::json::parse(j.dump())) == chars);
  REQUIRE(Vocabulary::from_json(Vocabulary::bytes().to_json()) == Vocabulary::bytes());
  REQUIRE(!(Vocabulary::from_json(Vocabulary::bytes().to_json()) == chars));

  using nlohmann::json;
  const auto prefix = std::string("run/vocab.json: vocabulary: ");
  REQUIRE_THAT(json_error(json::array()),
               Catch::Contains(prefix + "expected a JSON object, found array"));
  REQUIRE_THAT(
      json_error({{"type", "words"}, {"size", 3}}),
      Catch::Contains(prefix + "'type': expected \"bytes\" or \"characters\", found \"words\""));
  REQUIRE_THAT(json_error({{"type", "bytes"}, {"size", 255}}),
               Catch::Contains(prefix + "'size': expected 256 for type \"bytes\", found 255"));
  REQUIRE_THAT(json_error({{"type", "bytes"}}),
               Catch::Contains(prefix + "'size': expected an integer"));
  REQUIRE_THAT(json_error({{"type", "characters"}, {"size", 2}, {"characters", "ba"}}),
               Catch::Contains(prefix + "'characters': expected strictly increasing code points, "
                                        "found U+0061 'a' after U+0062 'b' at byte 1"));
  REQUIRE_THAT(json_error({{"type", "characters"}, {"size", 2}, {"characters", "aa"}}),
               Catch::Contains("found U+0061 'a' after U+0061 'a'"));
  REQUIRE_THAT(json_error({{"type", "characters"}, {"size", 3}, {"characters", "ab"}}),
               Catch::Contains(prefix + "'size': 3, but 'characters' holds 2"));
  REQUIRE_THAT(json_error({{"type", "characters"}, {"size", 0}, {"characters", ""}}),
               Catch::Contains(prefix + "'characters': expected at least one character"));
  REQUIRE_THAT(json_error({{"type", "characters"}, {"size", 1}, {"characters", 7}}),
               Catch::Contains(prefix + "'characters': expected a string"));
  REQUIRE_THAT(json_error({{"type", "characters"}, {"size", 1}, {"characters", "a"}, {"unk", 0}}),
               Catch::Contains(prefix + "unknown key 'unk' (expected type, size, characters)"));
}

TEST_CASE("make_windows gives every window with its shifted and next-token targets, as views",
          "[data][text]") {
  const auto tokens = torch::arange(10, at::kLong);
  auto w = kiln::data::make_windows(tokens, 4, 3);  // windows at 0 and 3; 6 would need token 10
  REQUIRE(torch::equal(w.x, torch::tensor({{0, 1, 2, 3}, {3, 4, 5, 6}}, at::kLong)));
  REQUIRE(torch::equal(w.targets, torch::tensor({{1, 2, 3, 4}, {4, 5, 6, 7}}, at::kLong)));
  REQUIRE(torch::equal(w.next_token, torch::tensor({4, 7}, at::kLong)));
  // Views of the tokens' storage, not copies.
  for (const auto* v : {&w.x, &w.targets, &w.next_token}) REQUIRE(v->is_alias_of(tokens));

  w = kiln::data::make_windows(tokens, 3, 1);
  REQUIRE(w.x.sizes() == c10::IntArrayRef{7, 3});
  for (int64_t i = 0; i < 7; ++i) {
    REQUIRE(torch::equal(w.x[i], tokens.narrow(0, i, 3)));
    REQUIRE(torch::equal(w.targets[i], tokens.narrow(0, i + 1, 3)));
    REQUIRE(w.next_token[i].item<int64_t>() == i + 3);
  }
  // A strided, offset view of tokens is made contiguous first.
  const auto odd = torch::arange(30, at::kLong).slice(0, 1, 30, 2);  // 1 3 5 … 29
  w = kiln::data::make_windows(odd, 2, 2);
  REQUIRE(torch::equal(w.x[1], torch::tensor({5, 7}, at::kLong)));
  REQUIRE(w.next_token[1].item<int64_t>() == 9);
  // Exactly block_size + 1 tokens make one window; fewer is an error naming both numbers.
  REQUIRE(kiln::data::make_windows(tokens, 9, 5).x.size(0) == 1);
  REQUIRE_THROWS_WITH(
      kiln::data::make_windows(tokens, 10, 1),
      Catch::Contains("text: the corpus has 10 tokens, block_size 10 needs at least 11"));
  REQUIRE_THROWS_AS(kiln::data::make_windows(tokens.to(at::kInt), 2, 1), c10::Error);
  REQUIRE_THROWS_AS(kiln::data::make_windows(tokens, 2, 0), c10::Error);
  // The whole path: a corpus, its vocabulary, its windows.
  const auto vocab = Vocabulary::characters("abcabcabc");
  w = kiln::data::make_windows(vocab.encode("abcabcabc"), 3, 3);
  REQUIRE(vocab.decode(w.x[1]) == "abc");
  REQUIRE(vocab.decode(w.targets[1]) == "bca");
}

TEST_CASE("read_text skips a folder's files that data.exclude's patterns match", "[text][data]") {
  kiln::test::TempDir dir;
  const std::string corpus = dir / "c";
  std::filesystem::create_directories(corpus);
  std::ofstream(corpus + "/b") << "beta";
  std::ofstream(corpus + "/b.dat") << "\xff binary";
  std::ofstream(corpus + "/a") << "alpha\n";
  REQUIRE(kiln::data::read_text(corpus, {"*.dat"}) == "alpha\nbeta");
  REQUIRE_THAT(text_error(corpus), Catch::Contains("b.dat"));  // without the pattern: not UTF-8
  REQUIRE_THAT(kiln::test::input_error_of([&] { kiln::data::read_text(corpus, {"*"}); }),
               Catch::Contains("no files in this folder") && Catch::Contains("data.exclude"));
}

TEST_CASE("text for a sequence model: every position's target, random windows drawn per epoch",
          "[text][data]") {
  kiln::test::TempDir dir;
  const std::string path = dir / "t.txt";
  std::string text;
  for (int i = 0; i < 200; ++i) text += static_cast<char>('a' + i % 26);
  std::ofstream(path) << text;  // 200 characters: 180 train, 20 test
  const auto options = kiln::data::DataOptions().format("text").train(path).block_size(8).stride(8)
                           .test_fraction(0.1).sequence(true).windows("random");
  const auto d = kiln::data::load_data(options);
  REQUIRE(d.schema.transform["encoding"] == "tokens");
  REQUIRE(kiln::data::takes_tokens(d.schema));
  REQUIRE(kiln::data::model_input_size(d.schema) == 8);
  REQUIRE(d.train.size() == 180 - 8);            // the pool: a window at every start
  REQUIRE(d.train_draws == (180 - 8 - 1) / 8 + 1);  // as many as stride 8 makes
  REQUIRE(d.train.y.sizes() == at::IntArrayRef({d.train.size(), 8}));
  REQUIRE(at::equal(d.train.y.narrow(1, 0, 7), d.train.x.narrow(1, 1, 7)));  // shifted by one
  REQUIRE(d.test.size() == 2);  // 20 test tokens, windows 8 apart: each token a target once
  REQUIRE(d.test.x[1][0].item<int64_t>() == d.test.y[0][7].item<int64_t>());
  // The loader draws train_draws windows per epoch, the same for the same (seed, epoch).
  kiln::data::BatchLoader a(d.train.x, d.train.y, 4, true, 3, d.train_draws), b(d.train.x, d.train.y, 4, true, 3, d.train_draws);
  REQUIRE(a.examples() == d.train_draws);
  REQUIRE(a.size() == (d.train_draws + 3) / 4);
  a.set_epoch(2);
  b.set_epoch(2);
  REQUIRE(at::equal(a.batch(1).x, b.batch(1).x));
  b.set_epoch(3);
  REQUIRE(!at::equal(a.batch(1).x, b.batch(1).x));
  REQUIRE(a.batch(a.size() - 1).x.size(0) == d.train_draws - 4 * (a.size() - 1));
  // On a device the windows stay views of the tokens: the buffer moves, not N·T copies.
  const auto moved = kiln::data::to_device(d.train.x, kiln::test::fake_device());
  REQUIRE(moved.device() == kiln::test::fake_device());
  REQUIRE(moved.storage().nbytes() == d.train.x.storage().nbytes());
  REQUIRE(at::equal(moved.cpu(), d.train.x));
  REQUIRE(at::equal(kiln::data::to_device(d.train.y, kiln::test::fake_device()).cpu(), d.train.y));
  // A saved schema for one-hot windows does not feed a sequence model.
  auto mlp = kiln::data::load_data(kiln::data::DataOptions(options).sequence(false));
  REQUIRE_THAT(kiln::test::input_error_of([&] { kiln::data::load_data(options, &mlp.schema); }),
               Catch::Contains("took text encoded as one_hot, this one takes tokens"));
  REQUIRE_THAT(kiln::test::input_error_of([&] {
                 kiln::data::load_data(kiln::data::DataOptions(options).windows("sliding"));
               }),
               Catch::Contains("data.windows: expected strided or random, found 'sliding'"));
}
