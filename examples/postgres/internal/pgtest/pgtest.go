// Package pgtest starts a throwaway PostgreSQL server: its own data folder
// (initdb), a free TCP port on 127.0.0.1, the Unix socket in that folder, and
// stops it. A test package starts one from TestMain; the demo starts one too.
//
// Guarantees:
//   - the server is Debian's (or any) PostgreSQL found by
//     hack/install-postgres.sh's rules: $OPZERO_PG_BIN, else the newest
//     /usr/lib/postgresql/<version>/bin;
//   - the superuser is "postgres" with a random password; TCP connections
//     need the password (scram-sha-256), the Unix socket is trusted;
//   - PostgreSQL refuses to run as root: as root the server runs as the
//     "postgres" user (Debian's package creates it), else as "nobody", by
//     setting the child's credentials (what runuser does); the folder is
//     given to that user;
//   - the server dies with the process that started it (a parent-death
//     signal), so a killed test leaves no server behind; Stop shuts it down
//     fast and removes the folder; Start removes the folders of servers
//     that are gone (a test killed before Stop), once 10 minutes old.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Server is a running PostgreSQL.
type Server struct {
	Dir      string // data folder (data/), socket and log
	Host     string // 127.0.0.1
	Port     int
	Password string // the superuser's
	Version  string // the server's major version, e.g. "15"

	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// AdminDSN is the superuser's connection URL for database db (e.g.
// "postgres") over TCP with its password.
func (s *Server) AdminDSN(db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword("postgres", s.Password),
		Host: net.JoinHostPort(s.Host, strconv.Itoa(s.Port)), Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

// LogPath is the server's log file.
func (s *Server) LogPath() string { return filepath.Join(s.Dir, "postgres.log") }

// BinDir finds initdb, pg_ctl and postgres as hack/install-postgres.sh does.
func BinDir() (string, error) {
	if d := os.Getenv("OPZERO_PG_BIN"); d != "" {
		return d, hasServer(d)
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if hasServer(d) == nil {
			return d, nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries (initdb, postgres under /usr/lib/postgresql/*/bin): run hack/install-postgres.sh (make test does), or set OPZERO_PG_BIN to the folder holding them")
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func hasServer(d string) error {
	for _, b := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(d, b)); err != nil {
			return fmt.Errorf("OPZERO_PG_BIN=%s: %w", d, err)
		}
	}
	return nil
}

// Start initialises a data folder and starts the server; it returns once
// the server accepts connections.
func Start(ctx context.Context) (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	cred, owner, err := runAs()
	if err != nil {
		return nil, err
	}
	removeStale()
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir, Host: "127.0.0.1", Password: randomHex(16)}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(dir)
		}
	}()
	if owner != nil {
		if err := os.Chown(dir, owner[0], owner[1]); err != nil {
			return nil, err
		}
	}
	pwfile := filepath.Join(dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(s.Password+"\n"), 0o600); err != nil {
		return nil, err
	}
	if owner != nil {
		_ = os.Chown(pwfile, owner[0], owner[1])
	}
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", filepath.Join(dir, "data"), "-U", "postgres",
		"--pwfile", pwfile, "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	_ = os.Remove(pwfile)
	if b, err := os.ReadFile(filepath.Join(dir, "data", "PG_VERSION")); err == nil {
		s.Version = strings.TrimSpace(string(b))
	}
	for attempt := 0; ; attempt++ {
		err = s.start(ctx, bin, cred)
		if err == nil || attempt == 4 || !strings.Contains(err.Error(), "could not bind") {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// start runs postgres on a free port and waits until postmaster.pid says
// "ready" (what pg_ctl -w waits for).
func (s *Server) start(ctx context.Context, bin string, cred *syscall.Credential) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	s.Port = port
	logf, err := os.Create(s.LogPath())
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", filepath.Join(s.Dir, "data"), "-p", strconv.Itoa(port),
		"-k", s.Dir, "-c", "listen_addresses="+s.Host, "-c", "fsync=off", "-c", "max_connections=200")
	cmd.Stdout, cmd.Stderr = logf, logf
	// SIGQUIT: immediate shutdown if the starting process dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func() { s.err = cmd.Wait(); close(s.done) }()
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(filepath.Join(s.Dir, "data", "postmaster.pid")); err == nil {
			if lines := strings.Split(string(b), "\n"); len(lines) > 7 && strings.TrimSpace(lines[7]) == "ready" {
				return nil
			}
		}
		select {
		case <-s.done:
			b, _ := os.ReadFile(s.LogPath())
			return fmt.Errorf("postgres exited (%v) before it was ready; its log:\n%s", s.err, b)
		case <-ctx.Done():
			s.Stop()
			return ctx.Err()
		case <-deadline.C:
			s.Stop()
			b, _ := os.ReadFile(s.LogPath())
			return fmt.Errorf("postgres not ready after 60s; its log:\n%s", b)
		case <-tick.C:
		}
	}
}

// Stop shuts the server down (fast shutdown: open sessions are ended) and
// removes its folder.
func (s *Server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
		}
	}
	_ = os.RemoveAll(s.Dir)
}

// runAs returns the credentials the server runs with: none (the current
// user) unless root, then "postgres" or else "nobody"; owner is that
// user's uid and gid for the folder.
func runAs() (cred *syscall.Credential, owner []int, err error) {
	if os.Geteuid() != 0 {
		return nil, nil, nil
	}
	var u *user.User
	for _, name := range []string{"postgres", "nobody"} {
		if u, err = user.Lookup(name); err == nil {
			break
		}
	}
	if u == nil {
		return nil, nil, errors.New("PostgreSQL refuses to run as root and there is no postgres or nobody user to run it as: create one (useradd --system postgres)")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, []int{uid, gid}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// removeStale removes the folders of earlier servers whose postmaster is
// gone; a folder younger than 10 minutes may be another package's initdb.
func removeStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "pgtest-*"))
	for _, d := range dirs {
		fi, err := os.Stat(d)
		if err != nil || time.Since(fi.ModTime()) < 10*time.Minute {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(d, "data", "postmaster.pid")); err == nil {
			pid, _ := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
			if pid > 0 && syscall.Kill(pid, 0) == nil {
				continue
			}
		}
		_ = os.RemoveAll(d)
	}
}
