// Precompiled header for the torch-frontend parts of kiln (nn, optim, data, train)
// and the tests: parsing the frontend once saves minutes on two cores.
#pragma once
#include <torch/torch.h>
