# cmake -DVERSION=<project version> -DSOURCE_DIR=<repo> -P this
# ctest "the project version is the same everywhere": CMakeLists.txt's
# project(VERSION) is the one version. The daemon, the libraries, the C API,
# the pkg-config and CMake packages and the .debs take it from the build;
# what cannot (files read without CMake) is checked here to say the same:
#   python/gputune/_version.py        pip reads the package's version there
#   python/pyproject.toml             must take it from _version.py, not say one
#   deploy/debian/changelog           its newest entry (packed into every .deb)
#   deploy/kubernetes/*.yaml          the gputuned image tags
# Fails naming each file that differs and what it says.
set(problems "")

file(READ ${SOURCE_DIR}/python/gputune/_version.py text)
if(text MATCHES "\n__version__ = \"([^\"]*)\"")
  if(NOT CMAKE_MATCH_1 STREQUAL VERSION)
    string(APPEND problems
      "\n  python/gputune/_version.py says ${CMAKE_MATCH_1}")
  endif()
else()
  string(APPEND problems
    "\n  python/gputune/_version.py has no __version__ = \"...\" line")
endif()

file(READ ${SOURCE_DIR}/python/pyproject.toml text)
if(text MATCHES "\nversion = \"([^\"]*)\"")
  string(APPEND problems "\n  python/pyproject.toml says version = "
    "\"${CMAKE_MATCH_1}\" (it must read gputune._version instead)")
endif()
if(NOT text MATCHES "dynamic = \\[\"version\"\\]" OR
   NOT text MATCHES "version = {attr = \"gputune\\._version\\.__version__\"}")
  string(APPEND problems "\n  python/pyproject.toml does not take its version "
    "from gputune._version.__version__")
endif()

file(STRINGS ${SOURCE_DIR}/deploy/debian/changelog first LIMIT_COUNT 1)
if(first MATCHES "^gputune \\(([^)]*)\\) ")
  if(NOT CMAKE_MATCH_1 STREQUAL VERSION)
    string(APPEND problems "\n  deploy/debian/changelog's newest entry is "
      "${CMAKE_MATCH_1} (add an entry for ${VERSION})")
  endif()
else()
  string(APPEND problems
    "\n  deploy/debian/changelog does not start with 'gputune (VERSION) '")
endif()

file(GLOB manifests ${SOURCE_DIR}/deploy/kubernetes/*.yaml)
set(tags 0)
foreach(manifest IN LISTS manifests)
  file(STRINGS ${manifest} lines REGEX "image: gputune/gputuned:")
  foreach(line IN LISTS lines)
    math(EXPR tags "${tags} + 1")
    string(REGEX REPLACE ".*image: gputune/gputuned:([^ ]*).*" "\\1" tag
      "${line}")
    if(NOT tag STREQUAL VERSION)
      file(RELATIVE_PATH name ${SOURCE_DIR} ${manifest})
      string(APPEND problems "\n  ${name}: image gputune/gputuned:${tag}")
    endif()
  endforeach()
endforeach()
if(tags EQUAL 0)
  string(APPEND problems
    "\n  no 'image: gputune/gputuned:' in deploy/kubernetes/*.yaml")
endif()

if(problems)
  message(FATAL_ERROR "CMakeLists.txt's project(VERSION) is ${VERSION}, "
    "but:${problems}")
endif()
message(STATUS "version ${VERSION}: python/gputune/_version.py, "
  "pyproject.toml, deploy/debian/changelog and ${tags} Kubernetes image "
  "tags agree")
