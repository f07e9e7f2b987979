// Catch2's main and implementation, compiled once and without the precompiled
// header (which would include catch.hpp before CATCH_CONFIG_MAIN is defined).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
