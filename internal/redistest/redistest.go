// Package redistest starts real redis-server processes for tests: a single
// server or a Redis Cluster, on free loopback ports, in temporary
// directories, stopped when the test (or TestMain) ends. It never uses a
// Redis that is already running, and never installs one: redis-server and
// redis-cli are found on PATH; a test that needs them is skipped in -short
// mode and fails without -short when they are missing (internal/testbin's
// rule; New, NewCluster and Shared apply it).
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testbin"
)

// Binary returns the path of redis-server on PATH.
func Binary() (string, error) {
	p, err := testbin.RedisServer.Look()
	if err != nil {
		return "", fmt.Errorf("redistest: redis-server %v (%s)", err, testbin.RedisServer.Install)
	}
	return p, nil
}

// New starts a redis-server for t (as Start does), stopped when t ends. In
// -short mode t is skipped; a missing redis-server fails it otherwise.
func New(t testing.TB, extra ...string) *Server {
	t.Helper()
	testbin.Need(t, testbin.RedisServer)
	s, err := Start(extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Shared is one redis-server for the tests of a test binary: started by
// the first test that asks for its address, stopped by Stop (in TestMain,
// after m.Run). Each test that asks is skipped in -short mode, or fails
// when redis-server is missing, as with New.
type Shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// Addr returns the shared server's address, starting it on first use.
func (s *Shared) Addr(t testing.TB) string {
	t.Helper()
	testbin.Need(t, testbin.RedisServer)
	s.once.Do(func() { s.srv, s.err = Start() })
	if s.err != nil {
		t.Fatal(s.err)
	}
	return s.srv.Addr
}

// Stop stops the shared server if a test started it.
func (s *Shared) Stop() {
	if s.srv != nil {
		s.srv.Stop()
	}
}

// Server is a redis-server process of the test's own.
type Server struct {
	Addr string // host:port on 127.0.0.1
	Dir  string
	args []string
	cmd  *exec.Cmd
	mu   sync.Mutex
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start starts a redis-server with no persistence on a free port; extra
// are more "--name value" arguments. Stop it with Stop.
func Start(extra ...string) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sluice-redis-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 { // a port taken between FreePort and listen: try another
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Dir: dir}
		s.args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--protected-mode", "no", "--logfile", filepath.Join(dir, "redis.log")}, extra...)
		if err := s.run(bin); err != nil {
			lastErr = err
			continue
		}
		return s, nil
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

func (s *Server) run(bin string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command(bin, s.args...)
	cmd.SysProcAttr = procAttr() // on Linux: never outlive the tests
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
			return fmt.Errorf("redistest: redis-server on %s exited: %s", s.Addr, tail(log))
		default:
		}
		if err := ping(s.Addr); err == nil {
			s.cmd = cmd
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Kill()
	return fmt.Errorf("redistest: redis-server on %s did not answer within 10 s", s.Addr)
}

func tail(b []byte) string {
	if len(b) > 500 {
		b = b[len(b)-500:]
	}
	return string(b)
}

// Do sends one command in RESP and returns the reply's first line.
func Do(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if strings.HasPrefix(line, "-") {
		return "", errors.New(line[1:])
	}
	return line, nil
}

// ping reports whether a server answers at addr: PONG, or NOAUTH from a
// server started with --requirepass (it answers, and wants a password).
func ping(addr string) error {
	r, err := Do(addr, "PING")
	if err != nil && strings.HasPrefix(err.Error(), "NOAUTH") {
		return nil
	}
	if err == nil && r != "+PONG" {
		err = fmt.Errorf("PING answered %q", r)
	}
	return err
}

// Kill stops the server at once (SIGKILL), as a crash would.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.cmd.Process.Signal(syscall.SIGCONT)
		s.cmd.Process.Kill()
		s.cmd.Process.Wait()
		s.cmd = nil
	}
}

// Pause freezes the server (SIGSTOP): connections stay open, nothing
// answers. Resume with Resume.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.cmd.Process.Signal(sig)
	}
}

// Restart starts a killed server again on the same port (empty: nothing
// is persisted).
func (s *Server) Restart() error {
	bin, err := Binary()
	if err != nil {
		return err
	}
	var last error
	for range 50 { // the port may linger a moment after the kill
		if last = s.run(bin); last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return last
}

// Stop kills the server and removes its directory.
func (s *Server) Stop() {
	s.Kill()
	os.RemoveAll(s.Dir)
}

// Cluster is a Redis Cluster of masters made with redis-cli --cluster create.
type Cluster struct {
	Nodes []*Server
}

// Addrs returns the nodes' addresses.
func (c *Cluster) Addrs() []string {
	var a []string
	for _, n := range c.Nodes {
		a = append(a, n.Addr)
	}
	return a
}

// NewCluster starts a cluster of n masters for t (as StartCluster does),
// stopped when t ends. In -short mode t is skipped; a missing
// redis-server or redis-cli fails it otherwise.
func NewCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	testbin.Need(t, testbin.RedisServer)
	testbin.Need(t, testbin.RedisCLI)
	c, err := StartCluster(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// SharedCluster is one cluster of N masters for the tests of a test
// binary, as Shared is one server.
type SharedCluster struct {
	N    int
	once sync.Once
	c    *Cluster
	err  error
}

// Addrs returns the shared cluster's node addresses, starting it on first
// use.
func (s *SharedCluster) Addrs(t testing.TB) []string {
	t.Helper()
	testbin.Need(t, testbin.RedisServer)
	testbin.Need(t, testbin.RedisCLI)
	s.once.Do(func() { s.c, s.err = StartCluster(s.N) })
	if s.err != nil {
		t.Fatal(s.err)
	}
	return s.c.Addrs()
}

// Stop stops the shared cluster if a test started it.
func (s *SharedCluster) Stop() {
	if s.c != nil {
		s.c.Stop()
	}
}

// StartCluster starts n >= 3 masters and joins them into a cluster.
func StartCluster(n int) (*Cluster, error) {
	c := &Cluster{}
	for range n {
		s, err := Start("--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
			"--cluster-config-file", fmt.Sprintf("nodes-%d.conf", time.Now().UnixNano()))
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	cli, err := testbin.RedisCLI.Look()
	if err != nil {
		c.Stop()
		return nil, fmt.Errorf("redistest: redis-cli %v (%s)", err, testbin.RedisCLI.Install)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		c.Stop()
		return nil, fmt.Errorf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	// Wait until every node sees the cluster as ok.
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range c.Nodes {
		for {
			info, err := info(s.Addr)
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				c.Stop()
				return nil, fmt.Errorf("redistest: cluster not ok on %s: %v %s", s.Addr, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c, nil
}

// info returns CLUSTER INFO (a bulk reply).
func info(addr string) (string, error) { return Bulk(addr, "CLUSTER", "INFO") }

// Stop stops every node.
func (c *Cluster) Stop() {
	for _, s := range c.Nodes {
		s.Stop()
	}
}

// Bulk sends one command whose reply is a bulk string (INFO, CLUSTER
// INFO) and returns that string.
func Bulk(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	head = strings.TrimRight(head, "\r\n")
	if !strings.HasPrefix(head, "$") {
		return "", fmt.Errorf("redistest: %s answered %q, not a bulk string", args[0], head)
	}
	size, err := strconv.Atoi(head[1:])
	if err != nil || size < 0 {
		return "", fmt.Errorf("redistest: %s answered %q", args[0], head)
	}
	buf := make([]byte, size+2)
	if _, err := io.ReadFull(r, buf); err != nil {
		return "", err
	}
	return string(buf[:size]), nil
}

// CommandCalls returns the calls of each command since the server started
// or CONFIG RESETSTAT (INFO commandstats), by lower-case command name.
func CommandCalls(addr string) (map[string]int64, error) {
	s, err := Bulk(addr, "INFO", "commandstats")
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for line := range strings.SplitSeq(s, "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		if n, err := strconv.ParseInt(calls, 10, 64); err == nil {
			out[name] = n
		}
	}
	return out, nil
}
