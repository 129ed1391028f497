// daemon/buffer_pool.h: buffers come back empty with their memory, up to
// the pool's limits.
#include "daemon/buffer_pool.h"

#include "tests/support/catch.h"

namespace gputune {

TEST_CASE("a buffer given back is taken again, empty, with its capacity") {
  BufferPool pool(2, 1 << 20);
  std::unique_ptr<std::string> buffer = pool.Take();
  buffer->assign(100000, 'x');
  const char* memory = buffer->data();
  pool.Give(std::move(buffer));
  std::unique_ptr<std::string> again = pool.Take();
  CHECK(again->empty());
  CHECK(again->capacity() >= 100000);
  CHECK(again->data() == memory);
}

TEST_CASE("the pool keeps no more buffers, and none larger, than it was told") {
  BufferPool pool(1, 1000);
  auto big = pool.Take();
  big->reserve(5000);
  pool.Give(std::move(big));  // over 1000 bytes: freed
  CHECK(pool.Take()->capacity() < 5000);
  auto a = pool.Take();
  auto b = pool.Take();
  a->reserve(500);
  b->reserve(600);
  const char* kept = a->data();
  pool.Give(std::move(a));
  pool.Give(std::move(b));  // one is kept already: freed
  CHECK(pool.Take()->data() == kept);
  CHECK(pool.Take()->capacity() < 500);  // a new one
  pool.Give(nullptr);                    // allowed, ignored
}

}  // namespace gputune
