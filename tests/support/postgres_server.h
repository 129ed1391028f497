// PostgresServer: a real, throw-away PostgreSQL 15 server for the fleet
// tests, started from Debian's binaries (/usr/lib/postgresql/15/bin, or
// $GPUTUNE_PG_BINDIR).
//
//   if (!PostgresServer::Available()) SKIP(PostgresServer::Missing());
//   PostgresServer pg;                       // initdb + start, or throws
//   std::string conninfo = pg.CreateDatabase("fleet1");
//   pg.Stop(); pg.Start();                   // same data directory
//   auto rows = pg.Query("fleet1", "SELECT count(*) FROM fleet_entries");
//
// The server runs in a fresh directory under /tmp, as an unprivileged user
// when the test runs as root (PostgreSQL refuses to run as root; the user is
// $GPUTUNE_PG_USER, default "nobody"), listens only on a unix socket in that
// directory (listen_addresses = '', no TCP port), and asks for a password
// (scram-sha-256) so that tests can also give a wrong one. The destructor
// stops the server (immediate mode) and removes the directory.
//
// With Options::tls, it also listens on 127.0.0.1 (a free port) for TLS
// connections only (hostssl; plain TCP is refused), with a certificate for
// "localhost" signed by a CA made for this server (openssl, in the
// directory): TlsConnInfo connects as a remote daemon would, sslmode=
// verify-full against that CA.
#ifndef GPUTUNE_TESTS_SUPPORT_POSTGRES_SERVER_H_
#define GPUTUNE_TESTS_SUPPORT_POSTGRES_SERVER_H_

#include <string>
#include <vector>

namespace gputune::testing {

class PostgresServer {
 public:
  struct Options {
    bool tls = false;  // also TLS over TCP on 127.0.0.1 (see above)
  };
  // Whether initdb, pg_ctl and postgres are installed.
  static bool Available();
  // What is missing, for a SKIP message that says how to install it.
  static std::string Missing();

  // initdb in a fresh directory, then Start(). Throws std::runtime_error
  // with initdb's or the server's log when either fails.
  PostgresServer() : PostgresServer(Options{}) {}
  explicit PostgresServer(const Options& options);
  ~PostgresServer();
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  // pg_ctl start -w (waits until it accepts connections). Throws on failure.
  void Start();
  // pg_ctl stop -m fast: sessions are disconnected, the socket disappears.
  void Stop();
  bool running() const { return running_; }
  // SIGSTOPs the server (the postmaster and every backend): connections stay
  // open and nothing answers, as with a hung host. Resume SIGCONTs it.
  // Throws when the server's processes cannot be found.
  void Pause();
  void Resume();

  // The directory the socket lives in (libpq's `host`).
  const std::string& socket_dir() const { return socket_dir_; }
  // The superuser's password (user "postgres").
  static constexpr char kPassword[] = "fleet-test-secret";
  // A libpq connection string for `dbname` as the superuser.
  std::string ConnInfo(const std::string& dbname,
                       const std::string& password = kPassword) const;
  // CREATE DATABASE `name`; returns ConnInfo(name).
  std::string CreateDatabase(const std::string& name);
  // With Options::tls: a connection string for `dbname` as the superuser
  // over TCP to localhost:port(), sslmode=verify-full with `root_cert` as
  // sslrootcert (default: ca_file(), the CA that signed the server's
  // certificate).
  std::string TlsConnInfo(const std::string& dbname,
                          const std::string& root_cert = "") const;
  int port() const { return port_; }
  const std::string& ca_file() const { return ca_file_; }

  // Runs `sql` (one statement or several) in `dbname` as the superuser and
  // returns the last statement's rows as text (NULL as ""). Throws
  // std::runtime_error with the server's message on an error.
  std::vector<std::vector<std::string>> Query(const std::string& dbname,
                                              const std::string& sql) const;
  // The first column of the first row of Query, as a number.
  long long QueryNumber(const std::string& dbname,
                        const std::string& sql) const;

  std::string Log() const;

 private:
  // Runs a PostgreSQL binary as the server's user; returns its exit status.
  int RunAsServerUser(const std::vector<std::string>& argv,
                      const std::string& log) const;

  // The postmaster's pid and its children's (Pause, Resume).
  std::vector<int> ServerPids() const;

  std::string bindir_;
  std::string dir_;  // holds data/, the socket and the logs
  std::string data_dir_;
  std::string socket_dir_;
  std::string user_;  // empty: run as ourselves (not root)
  int port_ = 0;      // TCP port with Options::tls
  std::string ca_file_;
  bool running_ = false;
};

}  // namespace gputune::testing

#endif  // GPUTUNE_TESTS_SUPPORT_POSTGRES_SERVER_H_
