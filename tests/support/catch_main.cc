// The one Catch2 main every suite links.
#define CATCH_CONFIG_MAIN
#if defined(GPUTUNE_VENDORED_CATCH2)
#include "catch.hpp"
#else
#include <catch2/catch.hpp>
#endif
