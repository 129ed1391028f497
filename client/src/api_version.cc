// The anchor source of libgputune_api.so (the library's code comes from the
// static gputune_api, linked whole).
namespace gputune {

extern const char kApiLibrary[] = "gputune_api";

}  // namespace gputune
