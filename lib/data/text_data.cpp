// text_data(): a UTF-8 file or folder as next-token windows for a language model,
// with the vocabulary saved in the schema.
#include <ATen/ATen.h>
#include <c10/util/StringUtil.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "data/formats.h"
#include "data/text.h"
#include "util/error.h"

namespace kiln::data {
using json = nlohmann::ordered_json;

// --- text: a character (or byte) language model's windows ------------------------

Data text_data(const DataOptions& o, const DataSchema* saved) {
  if (o.block_size() < 1) throw InputError(c10::str("data.block_size: expected >= 1, found ", o.block_size()));
  if (o.stride() < 1) throw InputError(c10::str("data.stride: expected >= 1, found ", o.stride()));
  if (o.vocabulary() != "char" && o.vocabulary() != "byte")
    throw InputError(c10::str("data.vocabulary: expected char or byte, found '", o.vocabulary(), "'"));
  if (o.windows() != "strided" && o.windows() != "random")
    throw InputError(c10::str("data.windows: expected strided or random, found '", o.windows(), "'"));
  // A byte vocabulary reads any bytes; a character one needs UTF-8 to tell characters.
  const bool byte_vocabulary =
      saved ? saved->transform.contains("vocabulary") && saved->transform["vocabulary"].value("type", "") == "bytes"
            : o.vocabulary() == "byte";
  const std::string train_text = read_text(o.train(), o.exclude(), !byte_vocabulary);
  const std::string test_text =
      o.test().empty() ? std::string() : read_text(o.test(), o.exclude(), !byte_vocabulary);
  Data d;
  DataSchema& s = d.schema;
  const char* encoding = o.sequence() ? "tokens" : "one_hot";
  if (saved) {
    s = *saved;
    if (s.transform.value("encoding", "") != encoding)
      throw InputError(c10::str("data.json: the run's model took text encoded as ",
                                s.transform.value("encoding", "?"), ", this one takes ", encoding,
                                " (model.name changed since the run started?)"));
  } else {
    // A character vocabulary is the alphabet of all the text the run reads (a missing
    // character could not be encoded), not a statistic fitted on the training part.
    const auto vocab = byte_vocabulary ? Vocabulary::bytes() : Vocabulary::characters(train_text + test_text);
    s.format = "text";
    s.task = Task::kClassification;
    s.input_shape = {o.block_size()};
    s.outputs = vocab.size();
    // Class names are JSON strings (data.json, metrics): a byte above 0x7F is no UTF-8
    // text alone, so it is named by its value, "\x80"; every other id by its text.
    for (int64_t id = 0; id < vocab.size(); ++id) {
      if (!byte_vocabulary || id < 0x80) {
        s.classes.push_back(vocab.token_text(id));
        continue;
      }
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", static_cast<unsigned>(id));
      s.classes.emplace_back(hex);
    }
    s.transform = {{"encoding", encoding},
                   {"block_size", o.block_size()},
                   {"vocabulary", json::parse(vocab.to_json().dump())}};
    s.read = {{"stride", o.stride()}, {"windows", o.windows()}};
  }
  const auto vocab = Vocabulary::from_json(nlohmann::json::parse(s.transform.at("vocabulary").dump()),
                                           "data.json: transform.vocabulary");
  const int64_t block = s.transform.at("block_size").get<int64_t>();
  // Without a test file the last test_fraction of the text is the test set: windows
  // overlap, so a random split would put every test window's tokens in training too.
  at::Tensor train_tokens = vocab.encode(train_text), test_tokens;
  if (o.test().empty()) {
    if (!(o.test_fraction() > 0.0 && o.test_fraction() < 1.0))
      throw InputError(c10::str("data.test_fraction: expected a fraction in (0, 1), found ", o.test_fraction()));
    const int64_t n = train_tokens.numel();
    const int64_t cut = n - std::llround(o.test_fraction() * static_cast<double>(n));
    test_tokens = train_tokens.narrow(0, cut, n - cut).contiguous();
    train_tokens = train_tokens.narrow(0, 0, cut).contiguous();
  } else {
    test_tokens = vocab.encode(test_text);
  }
  const auto windows = [&](const at::Tensor& tokens, const std::string& what, int64_t stride,
                           int64_t limit) {
    if (tokens.numel() < block + 1)
      throw InputError(c10::str(what, ": expected at least data.block_size + 1 = ", block + 1,
                                " tokens, found ", tokens.numel()));
    const auto w = make_windows(tokens, block, stride);
    Dataset set{w.x, o.sequence() ? w.targets : w.next_token};
    if (limit > 0 && limit < set.size()) set = {set.x.narrow(0, 0, limit), set.y.narrow(0, 0, limit)};
    return set;
  };
  // Random windows start anywhere: all windows at stride 1 are the pool (views of the
  // tokens, no copy), and an epoch draws as many as data.stride would make.
  const bool random = o.windows() == "random";
  d.train = windows(train_tokens, o.train(), random ? 1 : o.stride(), random ? 0 : o.train_limit());
  if (random) {
    const int64_t strided = window_count(train_tokens.numel(), block, o.stride());
    d.train_draws = o.train_limit() > 0 ? std::min(o.train_limit(), strided) : strided;
  }
  // A sequence model is scored at every position of a window: windows block_size
  // apart make each test token a target once.
  d.test = windows(test_tokens,
                   o.test().empty() ? c10::str(o.train(), " (its last ", o.test_fraction(),
                                               " held out for testing)")
                                    : o.test(),
                   o.sequence() ? block : o.stride(), o.test_limit());
  return d;
}

}  // namespace kiln::data
