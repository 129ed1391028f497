#include "tests/support/postgres_server.h"

#include <fcntl.h>
#include <grp.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>

namespace gputune::testing {
namespace {

std::string BinDir() {
  const char* dir = std::getenv("GPUTUNE_PG_BINDIR");
  return dir != nullptr && *dir != '\0' ? dir : "/usr/lib/postgresql/15/bin";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct ConnCloser {
  void operator()(PGconn* c) const { PQfinish(c); }
};
struct ResultCloser {
  void operator()(PGresult* r) const { PQclear(r); }
};

}  // namespace

bool PostgresServer::Available() { return Missing().empty(); }

std::string PostgresServer::Missing() {
  const std::string dir = BinDir();
  for (const char* tool : {"initdb", "pg_ctl", "postgres"}) {
    const std::string path = dir + "/" + tool;
    if (access(path.c_str(), X_OK) != 0) {
      return "skipped: " + path +
             " not found (install postgresql-15: scripts/install-deps.sh, or "
             "set GPUTUNE_PG_BINDIR)";
    }
  }
  return "";
}

PostgresServer::PostgresServer() : bindir_(BinDir()) {
  char tmpl[] = "/tmp/gputune-pg-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
  dir_ = tmpl;
  data_dir_ = dir_ + "/data";
  socket_dir_ = dir_;
  uid_t uid = getuid();
  gid_t gid = getgid();
  if (geteuid() == 0) {
    // PostgreSQL refuses to run as root.
    const char* name = std::getenv("GPUTUNE_PG_USER");
    user_ = name != nullptr && *name != '\0' ? name : "nobody";
    const passwd* pw = getpwnam(user_.c_str());
    if (pw == nullptr) {
      throw std::runtime_error("no user '" + user_ +
                               "' to run PostgreSQL as (set GPUTUNE_PG_USER)");
    }
    uid = pw->pw_uid;
    gid = pw->pw_gid;
  }
  const std::string pwfile = dir_ + "/pwfile";
  std::ofstream(pwfile) << kPassword << "\n";
  if (chown(dir_.c_str(), uid, gid) != 0 ||
      chown(pwfile.c_str(), uid, gid) != 0) {
    throw std::runtime_error("cannot hand " + dir_ + " to the server's user");
  }
  const int rc = RunAsServerUser(
      {bindir_ + "/initdb", "-D", data_dir_, "-U", "postgres", "-E", "UTF8",
       "--auth-local=scram-sha-256", "--auth-host=reject", "--pwfile=" + pwfile,
       "--no-sync", "--no-instructions"},
      dir_ + "/initdb.log");
  if (rc != 0) {
    throw std::runtime_error("initdb failed:\n" +
                             ReadFile(dir_ + "/initdb.log"));
  }
  // Only the unix socket in our directory: nothing on the network.
  std::ofstream conf(data_dir_ + "/postgresql.conf", std::ios::app);
  conf << "listen_addresses = ''\n"
       << "unix_socket_directories = '" << socket_dir_ << "'\n"
       << "max_connections = 200\n"
       << "fsync = off\n";  // a test server: crash safety is not under test
  conf.close();
  Start();
}

PostgresServer::~PostgresServer() {
  if (running_) {
    RunAsServerUser(
        {bindir_ + "/pg_ctl", "-D", data_dir_, "-m", "immediate", "-w", "stop"},
        dir_ + "/pg_ctl.log");
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

int PostgresServer::RunAsServerUser(const std::vector<std::string>& argv,
                                    const std::string& log) const {
  const passwd* pw = user_.empty() ? nullptr : getpwnam(user_.c_str());
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    if (pw != nullptr) {
      if (setgroups(0, nullptr) != 0 || setgid(pw->pw_gid) != 0 ||
          setuid(pw->pw_uid) != 0) {
        _exit(126);
      }
    }
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    if (chdir(dir_.c_str()) != 0) _exit(126);
    std::vector<char*> args;
    std::vector<std::string> copy = argv;
    for (std::string& a : copy) args.push_back(a.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

void PostgresServer::Start() {
  const int rc =
      RunAsServerUser({bindir_ + "/pg_ctl", "-D", data_dir_, "-l",
                       dir_ + "/server.log", "-w", "-t", "60", "start"},
                      dir_ + "/pg_ctl.log");
  if (rc != 0) {
    throw std::runtime_error("PostgreSQL did not start:\n" + Log());
  }
  running_ = true;
}

void PostgresServer::Stop() {
  const int rc = RunAsServerUser(
      {bindir_ + "/pg_ctl", "-D", data_dir_, "-m", "fast", "-w", "stop"},
      dir_ + "/pg_ctl.log");
  if (rc != 0) throw std::runtime_error("pg_ctl stop failed:\n" + Log());
  running_ = false;
}

std::string PostgresServer::ConnInfo(const std::string& dbname,
                                     const std::string& password) const {
  return "host=" + socket_dir_ + " dbname=" + dbname +
         " user=postgres password=" + password;
}

std::string PostgresServer::CreateDatabase(const std::string& name) {
  Query("postgres", "CREATE DATABASE \"" + name + "\"");
  return ConnInfo(name);
}

std::vector<std::vector<std::string>> PostgresServer::Query(
    const std::string& dbname, const std::string& sql) const {
  std::unique_ptr<PGconn, ConnCloser> conn(
      PQconnectdb(ConnInfo(dbname).c_str()));
  if (PQstatus(conn.get()) != CONNECTION_OK) {
    throw std::runtime_error(std::string("connecting to PostgreSQL: ") +
                             PQerrorMessage(conn.get()));
  }
  std::unique_ptr<PGresult, ResultCloser> result(
      PQexec(conn.get(), sql.c_str()));
  const ExecStatusType st = PQresultStatus(result.get());
  if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
    throw std::runtime_error("'" + sql +
                             "': " + PQresultErrorMessage(result.get()));
  }
  std::vector<std::vector<std::string>> rows;
  for (int r = 0; r < PQntuples(result.get()); ++r) {
    auto& row = rows.emplace_back();
    for (int c = 0; c < PQnfields(result.get()); ++c) {
      row.emplace_back(PQgetvalue(result.get(), r, c));
    }
  }
  return rows;
}

long long PostgresServer::QueryNumber(const std::string& dbname,
                                      const std::string& sql) const {
  const auto rows = Query(dbname, sql);
  if (rows.empty() || rows[0].empty()) {
    throw std::runtime_error("'" + sql + "' returned no value");
  }
  return std::stoll(rows[0][0]);
}

std::string PostgresServer::Log() const {
  return ReadFile(dir_ + "/pg_ctl.log") + ReadFile(dir_ + "/server.log");
}

}  // namespace gputune::testing
