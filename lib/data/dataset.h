// One Dataset for every format kiln reads (IDX images, CSV tables, NumPy arrays,
// text): the tensors a model trains on, and the schema — task, shapes, class names,
// and every input transform fitted on the training split — that is saved with the
// run and every checkpoint, so a resumed or exported model sees the same inputs.
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/fashion_mnist.h"

namespace kiln::data {

enum class Task { kClassification, kRegression };

/// "classification" or "regression".
const char* task_name(Task task);

/// What `data.format` names: idx, csv, npy, text ("auto" picks one from data.train).
const std::vector<std::string>& data_formats();

struct DataOptions {
  /// idx, csv, npy, text, or auto: idx without data.train, else by its extension
  /// (.csv/.tsv → csv, .npy/.npz → npy, .txt/.md or a folder → text).
  TORCH_ARG(std::string, format) = "auto";
  /// idx: the folder with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz].
  TORCH_ARG(std::string, root) = kDefaultFashionMnistRoot;
  /// csv: a table; npy: the inputs (x.npy, or an .npz holding arrays x and y);
  /// text: a UTF-8 file or a folder of them.
  TORCH_ARG(std::string, train) = "";
  /// npy: the targets (y.npy); empty for an .npz.
  TORCH_ARG(std::string, train_targets) = "";
  /// The test split's files, as for train; empty splits data.test_fraction off train.
  TORCH_ARG(std::string, test) = "";
  TORCH_ARG(std::string, test_targets) = "";
  /// The share of the training rows held out (seeded by `seed`) when there is no test file.
  TORCH_ARG(double, test_fraction) = 0.2;
  /// csv: the label (target) column.
  TORCH_ARG(std::string, label) = "";
  /// csv: the feature columns; empty takes every column but the label.
  TORCH_ARG(std::vector<std::string>, features) = {};
  /// csv: columns one-hot encoded even though their values are numbers.
  TORCH_ARG(std::vector<std::string>, categorical) = {};
  /// "auto", "classification" or "regression".
  TORCH_ARG(std::string, task) = "auto";
  /// csv: what a missing value (an empty field, NA, N/A, NaN, null) gets: "error",
  /// "drop" (the row) or "mean" (the training mean; an all-zero one-hot row).
  TORCH_ARG(std::string, missing) = "error";
  /// csv: a category the training split never had: "error" or "zero" (all-zero row).
  TORCH_ARG(std::string, unseen) = "error";
  /// Standardise numeric inputs with the training split's mean and deviation.
  TORCH_ARG(bool, standardize) = true;
  /// csv: the field delimiter ("," "\t" ";" …), or "auto": a tab for a .tsv or .tab
  /// file, a comma for any other (each file by its own name).
  TORCH_ARG(std::string, delimiter) = "auto";
  /// Keep only the first N training / test examples; 0 keeps all.
  TORCH_ARG(int64_t, train_limit) = 0;
  TORCH_ARG(int64_t, test_limit) = 0;
  /// Seeds the test split.
  TORCH_ARG(uint64_t, seed) = 0;
  /// text: tokens per example (the model sees block_size tokens, predicts the next).
  TORCH_ARG(int64_t, block_size) = 32;
  /// text: tokens between the starts of consecutive windows.
  TORCH_ARG(int64_t, stride) = 1;
  /// text, training split: "strided" (every window data.stride apart, shuffled each
  /// epoch) or "random" (each epoch draws as many windows as "strided" has, each at a
  /// uniformly random start, from a generator seeded by (seed, epoch): a resumed run
  /// draws the same).
  TORCH_ARG(std::string, windows) = "strided";
  /// text, a folder: skip files whose name matches one of these shell patterns.
  TORCH_ARG(std::vector<std::string>, exclude) = {};
  /// text: targets for a sequence model (set by the trainer for gpt, not a config
  /// key): y holds every position's next token, (N, block_size), the model takes the
  /// token ids themselves, and the test windows are block_size apart so each test
  /// token is a target once. Otherwise y is the token after the window and the model
  /// sees the window one-hot.
  TORCH_ARG(bool, sequence) = false;
  /// text: "char" (the distinct characters of the text) or "byte" (256 ids).
  TORCH_ARG(std::string, vocabulary) = "char";
  /// Images, training batches only: mirror each left to right with probability 1/2.
  TORCH_ARG(bool, augment_flip) = false;
  /// Images, training batches only: pad by N pixels and crop back at a random offset; 0: off.
  TORCH_ARG(int64_t, augment_crop) = 0;
};

/// The data set's half of the model's contract: fitted on the training split,
/// written as data.json with the run and in every checkpoint, and given back to
/// load_data() on resume so the same transform applies even if the files changed.
struct DataSchema {
  std::string format;
  Task task = Task::kClassification;
  /// One example's input as the model sees it, e.g. {784}.
  std::vector<int64_t> input_shape;
  /// Classes, or regression targets per example.
  int64_t outputs = 0;
  /// Class names by id (classification).
  std::vector<std::string> classes;
  /// Regression: the model predicts (y − mean) / std per target; reports undo it.
  std::vector<double> target_mean, target_std;
  /// The input transform, format-specific (docs/data.md): idx {scale, mean, std};
  /// csv {columns: [{name, kind, mean, std | categories}]}; npy {mean, std} per feature.
  nlohmann::ordered_json transform;
  /// The options it was fitted with that change how files are read (csv: label,
  /// delimiter, missing, unseen).
  nlohmann::ordered_json read;

  nlohmann::ordered_json to_json() const;
  /// Validates every field; `source` starts the messages (a data.json path).
  static DataSchema from_json(const nlohmann::ordered_json& j, const std::string& source);
};

/// Examples of one split, on the CPU: x (N, input_shape…) float32 (idx: (N, H·W) uint8
/// pixels, int64 tokens for text: model_inputs() makes them the model's); y (N) int64
/// class ids, or (N, outputs) float32 standardised targets.
struct Dataset {
  at::Tensor x, y;
  int64_t size() const { return x.defined() ? x.size(0) : 0; }
};

struct Data {
  Dataset train, test;
  DataSchema schema;
  /// Training examples drawn at random (with replacement) per epoch instead of a
  /// shuffled pass over all of them; 0 = a pass (text with data.windows = "random").
  int64_t train_draws = 0;
};

/// Reads the training and test splits `options` names and fits the schema on the
/// training split; with `saved` (a resumed run's schema) applies that one instead,
/// and refuses data it does not fit. Bad files or options throw kiln::InputError.
/// Example: auto d = kiln::data::load_data(DataOptions().format("csv").train("t.csv").label("y"));
Data load_data(const DataOptions& options, const DataSchema* saved = nullptr);

/// What the model takes for a batch `x` of the data set: x itself (token ids for a
/// sequence model), idx pixels decoded, (pixel · scale − mean) / std in float32
/// (decode_pixels), or for text the tokens one-hot encoded and flattened,
/// (B, block_size · vocabulary) float32.
/// Example: auto logits = model.forward(kiln::data::model_inputs(batch.x, schema));
at::Tensor model_inputs(const at::Tensor& x, const DataSchema& schema);

/// `t` on `device`. A view that overlaps itself (text windows: each window shares all
/// but one token with the next) moves its buffer and is viewed the same way there,
/// so N windows of T tokens cost the tokens, not N·T copies of them (2.4 GB for a
/// 2.3 M-character corpus at T = 128); any other tensor moves as Tensor::to does.
/// Example: data.train.x = kiln::data::to_device(data.train.x, at::Device("cuda"));
at::Tensor to_device(const at::Tensor& t, const at::Device& device);

/// Whether the model takes the examples as token ids (text for a sequence model).
bool takes_tokens(const DataSchema& schema);

/// How many values one example gives the model (the product of model_inputs' shape
/// past the batch dimension; block_size for a sequence model's tokens).
int64_t model_input_size(const DataSchema& schema);

/// The format "auto" stands for with these options; throws kiln::InputError when
/// no format can be told.
std::string resolve_format(const DataOptions& options);

/// Seeded shuffle of 0..n−1 split into (train, test) index tensors, test taking
/// round(n·fraction) rows (at least 1, and at least 1 left for training).
std::pair<at::Tensor, at::Tensor> split_indices(int64_t n, double fraction, uint64_t seed,
                                                const std::string& source);

}  // namespace kiln::data
