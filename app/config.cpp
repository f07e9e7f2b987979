// Config parsing with toml++. Each key is declared once, in for_each_key(), and
// that one table drives parsing, overrides, validation messages, the resolved TOML
// and the help text, so they cannot drift apart.
#include "config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

namespace kiln::app {
namespace {

// The sections in order, and every key with its help. Adding a key is one line.
template <typename C, typename V>
void for_each_key(C& c, V&& v) {
  v("run", "name", c.run.name, "run directory name under run.dir");
  v("run", "dir", c.run.dir, "parent folder of run directories");
  v("data", "root", c.data.root, "folder with the Fashion-MNIST IDX files (.gz or plain)");
  v("data", "train_limit", c.data.train_limit, "use the first N training images; 0 = all");
  v("data", "test_limit", c.data.test_limit, "use the first N test images; 0 = all");
  v("model", "name", c.model.name, "model to build: mlp");
  v("model", "hidden", c.model.hidden, "hidden layer widths");
  v("model", "dropout", c.model.dropout, "dropout after each hidden activation, in [0, 1)");
  v("optim", "name", c.optim.name, "optimizer: adamw");
  v("optim", "lr", c.optim.lr, "learning rate");
  v("optim", "weight_decay", c.optim.weight_decay, "decoupled weight decay");
  v("optim", "beta1", c.optim.beta1, "first-moment decay");
  v("optim", "beta2", c.optim.beta2, "second-moment decay");
  v("optim", "eps", c.optim.eps, "denominator epsilon");
  v("train", "epochs", c.train.epochs, "passes over the training set");
  v("train", "batch_size", c.train.batch_size, "examples per optimizer step");
  v("train", "eval_batch_size", c.train.eval_batch_size, "examples per evaluation batch");
  v("train", "log_every", c.train.log_every, "steps between training lines in metrics.jsonl");
  v("train", "checkpoint_every", c.train.checkpoint_every, "steps between checkpoints; 0 = at the end only");
  v("train", "max_steps", c.train.max_steps, "stop after this many steps; 0 = run all epochs");
  v("train", "seed", c.train.seed, "seed of initialisation and shuffling");
  v("train", "threads", c.train.threads, "CPU threads; 0 = one per core");
  v("train", "device", c.train.device, "cpu or cuda");
}

const std::vector<std::string>& sections() {
  static const std::vector<std::string> s = {"run", "data", "model", "optim", "train"};
  return s;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

std::vector<std::string> keys_of(const std::string& section) {
  std::vector<std::string> keys;
  Config c;
  for_each_key(c, [&](const char* s, const char* k, auto&, const char*) {
    if (section == s) keys.emplace_back(k);
  });
  return keys;
}

const char* expected_name(const int64_t*) { return "an integer"; }
const char* expected_name(const double*) { return "a number"; }
const char* expected_name(const std::string*) { return "a string"; }
const char* expected_name(const std::vector<int64_t>*) { return "an array of integers"; }

// What a node holds, as a user would write it: `string "ten"`, `integer 3`.
std::string describe(const toml::node& node) {
  std::ostringstream s;
  s << node.type() << ' ';
  if (node.is_table()) s << "{…}";
  else if (node.is_string()) s << '"' << *node.value<std::string>() << '"';
  else node.visit([&](auto&& n) { s << n; });
  return s.str();
}

// Stores `node` into `field` or says why it cannot.
bool assign(int64_t& field, const toml::node& node) {
  if (!node.is_integer()) return false;
  field = *node.value<int64_t>();
  return true;
}
bool assign(double& field, const toml::node& node) {
  if (!node.is_number()) return false;  // an integer is fine where a float is expected
  field = *node.value<double>();
  return true;
}
bool assign(std::string& field, const toml::node& node) {
  if (!node.is_string()) return false;
  field = *node.value<std::string>();
  return true;
}
bool assign(std::vector<int64_t>& field, const toml::node& node) {
  const auto* arr = node.as_array();
  if (!arr || (!arr->empty() && !arr->is_homogeneous(toml::node_type::integer))) return false;
  std::vector<int64_t> out;
  for (const auto& e : *arr) out.push_back(*e.value<int64_t>());
  field = std::move(out);
  return true;
}

std::string where(const toml::node& node, const std::string& name) {
  const auto& src = node.source();
  if (!src.begin) return name;
  return name + ":" + std::to_string(src.begin.line) + ":" + std::to_string(src.begin.column);
}

// Sets [section] key from node; `place` names the origin for messages.
void set_key(Config& c, const std::string& section, const std::string& key, const toml::node& node,
             const std::string& place) {
  bool found = false;
  for_each_key(c, [&](const char* s, const char* k, auto& field, const char*) {
    if (found || section != s || key != k) return;
    found = true;
    if (!assign(field, node))
      throw ConfigError(place + ": [" + section + "] " + key + ": expected " +
                        expected_name(&field) + ", found " + describe(node));
    c.origin[section + "." + key] = place;
  });
  if (!found)
    throw ConfigError(place + ": unknown key '" + key + "' in [" + section +
                      "]; valid keys: " + join(keys_of(section)));
}

void check_section(const std::string& section, const std::string& place) {
  if (std::find(sections().begin(), sections().end(), section) == sections().end())
    throw ConfigError(place + ": unknown section [" + section + "]; valid sections: " +
                      join(sections()));
}

template <typename T>
std::string value_text(const T& v) {
  std::ostringstream s;
  if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    toml::array a;
    for (auto x : v) a.push_back(x);
    s << a;
  } else if constexpr (std::is_same_v<T, double>) {
    // Shortest text that reads back as the same double, in TOML float syntax.
    char buf[64];
    const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
    std::string t(buf, end);
    if (t.find_first_of(".eEn") == std::string::npos) t += ".0";
    s << t;
  } else {
    s << toml::value<T>(v);
  }
  return s.str();
}

}  // namespace

Config parse_config(const std::string& text, const std::string& name) {
  toml::table root;
  try {
    root = toml::parse(text, name);
  } catch (const toml::parse_error& e) {
    std::ostringstream s;
    s << name << ":" << e.source().begin.line << ":" << e.source().begin.column
      << ": TOML syntax error: " << e.description();
    throw ConfigError(s.str());
  }
  Config c;
  for (const auto& [section, node] : root) {
    const std::string sec(section.str());
    check_section(sec, where(node, name));
    const auto* table = node.as_table();
    if (!table)
      throw ConfigError(where(node, name) + ": [" + sec + "]: expected a table, found " +
                        describe(node));
    for (const auto& [key, value] : *table)
      set_key(c, sec, std::string(key.str()), value, where(value, name));
  }
  return c;
}

Config load_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(path + ": cannot read the config file (no such file?)");
  std::stringstream text;
  text << in.rdbuf();
  return parse_config(text.str(), path);
}

void apply_override(Config& c, const std::string& assignment) {
  const std::string place = "--set " + assignment;
  const auto eq = assignment.find('=');
  const auto dot = assignment.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq)
    throw ConfigError(place + ": expected section.key=value, found no " +
                      (eq == std::string::npos ? "'='" : "'.' before '='"));
  const std::string section = assignment.substr(0, dot);
  const std::string key = assignment.substr(dot + 1, eq - dot - 1);
  const std::string value = assignment.substr(eq + 1);
  check_section(section, place);
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    // A bare word: a string, if that is what the key holds.
    parsed.insert("v", value);
  }
  set_key(c, section, key, *parsed.get("v"), place);
  c.origin[section + "." + key] = "--set";
}

void validate(const Config& c) {
  const auto fail = [&](const std::string& key, const std::string& what, const std::string& found) {
    const auto it = c.origin.find(key);
    const std::string from = it == c.origin.end() ? "default" : it->second;
    throw ConfigError(from + ": " + key + ": expected " + what + ", found " + found);
  };
  const auto positive = [&](const std::string& key, int64_t v) {
    if (v <= 0) fail(key, "an integer > 0", std::to_string(v));
  };
  const auto non_negative = [&](const std::string& key, int64_t v) {
    if (v < 0) fail(key, "an integer >= 0", std::to_string(v));
  };
  if (c.run.name.empty() || c.run.name.find('/') != std::string::npos)
    fail("run.name", "a non-empty name without '/'", "\"" + c.run.name + "\"");
  non_negative("data.train_limit", c.data.train_limit);
  non_negative("data.test_limit", c.data.test_limit);
  if (c.model.name != "mlp") fail("model.name", "one of: mlp", "\"" + c.model.name + "\"");
  for (size_t i = 0; i < c.model.hidden.size(); ++i)
    positive("model.hidden", c.model.hidden[i]);
  if (!(c.model.dropout >= 0 && c.model.dropout < 1))
    fail("model.dropout", "a probability in [0, 1)", std::to_string(c.model.dropout));
  if (c.optim.name != "adamw") fail("optim.name", "one of: adamw", "\"" + c.optim.name + "\"");
  if (!(c.optim.lr > 0)) fail("optim.lr", "a number > 0", std::to_string(c.optim.lr));
  if (!(c.optim.weight_decay >= 0))
    fail("optim.weight_decay", "a number >= 0", std::to_string(c.optim.weight_decay));
  if (!(c.optim.beta1 >= 0 && c.optim.beta1 < 1))
    fail("optim.beta1", "a number in [0, 1)", std::to_string(c.optim.beta1));
  if (!(c.optim.beta2 >= 0 && c.optim.beta2 < 1))
    fail("optim.beta2", "a number in [0, 1)", std::to_string(c.optim.beta2));
  if (!(c.optim.eps >= 0)) fail("optim.eps", "a number >= 0", std::to_string(c.optim.eps));
  positive("train.epochs", c.train.epochs);
  positive("train.batch_size", c.train.batch_size);
  positive("train.eval_batch_size", c.train.eval_batch_size);
  positive("train.log_every", c.train.log_every);
  non_negative("train.checkpoint_every", c.train.checkpoint_every);
  non_negative("train.max_steps", c.train.max_steps);
  non_negative("train.seed", c.train.seed);
  non_negative("train.threads", c.train.threads);
  if (c.train.device != "cpu" && c.train.device != "cuda" && c.train.device.rfind("cuda:", 0) != 0)
    fail("train.device", "cpu, cuda or cuda:N", "\"" + c.train.device + "\"");
}

std::string to_toml(const Config& c) {
  std::ostringstream out;
  std::string current;
  for_each_key(c, [&](const char* s, const char* k, const auto& field, const char* help) {
    if (current != s) {
      out << (current.empty() ? "" : "\n") << '[' << s << "]\n";
      current = s;
    }
    out << k << " = " << value_text(field) << "  # " << help << '\n';
  });
  return out.str();
}

std::string describe_keys() {
  std::ostringstream out;
  Config c;
  for_each_key(c, [&](const char* s, const char* k, const auto& field, const char* help) {
    std::string name = std::string(s) + "." + k;
    name.resize(std::max<size_t>(name.size(), 24), ' ');
    out << "  " << name << ' ' << help << " (default " << value_text(field) << ")\n";
  });
  return out.str();
}

}  // namespace kiln::app
