#include "tests/support/postgres_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
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

// A TCP port on 127.0.0.1 that nothing listens on now.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    throw std::runtime_error("cannot find a free TCP port");
  }
  close(fd);
  return ntohs(addr.sin_port);
}

// Runs a shell command (openssl); throws with its output when it fails.
void Run(const std::string& command, const std::string& log) {
  const int rc = std::system((command + " >>" + log + " 2>&1").c_str());
  if (rc != 0) {
    throw std::runtime_error("'" + command + "' failed:\n" + ReadFile(log));
  }
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

PostgresServer::PostgresServer(const Options& options) : bindir_(BinDir()) {
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
  if (options.tls) {
    // A CA, and a certificate for localhost it signs; the server's key is
    // its user's alone (PostgreSQL refuses a key others can read).
    const std::string tls = dir_ + "/tls", log = dir_ + "/openssl.log";
    std::filesystem::create_directory(tls);
    ca_file_ = tls + "/ca.crt";
    Run("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "
        "'/CN=gputune test CA' -keyout " +
            tls + "/ca.key -out " + ca_file_,
        log);
    Run("openssl req -newkey rsa:2048 -nodes -subj '/CN=localhost' -keyout " +
            tls + "/server.key -out " + tls + "/server.csr",
        log);
    std::ofstream(tls + "/san.ext")
        << "subjectAltName = DNS:localhost, IP:127.0.0.1\n";
    Run("openssl x509 -req -in " + tls + "/server.csr -CA " + ca_file_ +
            " -CAkey " + tls + "/ca.key -CAcreateserial -days 2 -extfile " +
            tls + "/san.ext -out " + tls + "/server.crt",
        log);
    const std::string key = tls + "/server.key";
    if (chown(key.c_str(), uid, gid) != 0 || chmod(key.c_str(), 0600) != 0) {
      throw std::runtime_error("cannot hand " + key + " to the server's user");
    }
    port_ = FreePort();
    conf << "listen_addresses = '127.0.0.1'\n"
         << "port = " << port_ << "\n"
         << "ssl = on\n"
         << "ssl_cert_file = '" << tls << "/server.crt'\n"
         << "ssl_key_file = '" << key << "'\n";
    // TLS with a password over TCP first; initdb's host lines (reject)
    // still refuse plain TCP.
    const std::string hba = data_dir_ + "/pg_hba.conf";
    const std::string rules = ReadFile(hba);
    std::ofstream(hba) << "hostssl all all 127.0.0.1/32 scram-sha-256\n"
                       << rules;
  }
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

std::vector<int> PostgresServer::ServerPids() const {
  std::ifstream pidfile(data_dir_ + "/postmaster.pid");
  int postmaster = 0;
  if (!(pidfile >> postmaster) || postmaster <= 0) {
    throw std::runtime_error("no postmaster.pid in " + data_dir_);
  }
  std::vector<int> pids = {postmaster};
  for (const auto& dir : std::filesystem::directory_iterator("/proc")) {
    const std::string name = dir.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(dir.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid ...: comm may hold spaces, so after the last ')'.
    const size_t paren = line.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(line.substr(paren + 1));
    std::string state;
    int ppid = 0;
    if (rest >> state >> ppid && ppid == postmaster) {
      pids.push_back(std::stoi(name));
    }
  }
  return pids;
}

void PostgresServer::Pause() {
  for (int pid : ServerPids()) kill(pid, SIGSTOP);
}

void PostgresServer::Resume() {
  for (int pid : ServerPids()) kill(pid, SIGCONT);
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
  // The socket's name carries the port: 5432 unless Options::tls chose one.
  return "host=" + socket_dir_ +
         (port_ != 0 ? " port=" + std::to_string(port_) : std::string()) +
         " dbname=" + dbname + " user=postgres password=" + password;
}

std::string PostgresServer::TlsConnInfo(const std::string& dbname,
                                        const std::string& root_cert) const {
  if (port_ == 0) throw std::logic_error("PostgresServer without Options::tls");
  return "host=localhost port=" + std::to_string(port_) + " dbname=" + dbname +
         " user=postgres password=" + kPassword +
         " sslmode=verify-full sslrootcert=" +
         (root_cert.empty() ? ca_file_ : root_cert);
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
