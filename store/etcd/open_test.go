package etcd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenure-dev/tenure/internal/harness/testenv"
	"github.com/tenure-dev/tenure/store"
	"github.com/tenure-dev/tenure/store/storetest"
)

const secret = "S3cr3t-hunter2"

func TestURLsBecomeClientConfigs(t *testing.T) {
	for _, tc := range []struct {
		url       string
		endpoints []string
		user      string
		dial      time.Duration
		tls       bool
	}{
		{"etcd://127.0.0.1:2379", []string{"http://127.0.0.1:2379"}, "", 5 * time.Second, false},
		{"etcd://h1,h2:2380/", []string{"http://h1:2379", "http://h2:2380"}, "", 5 * time.Second, false},
		{"etcd://[::1]:2379,[fe80::1]", []string{"http://[::1]:2379", "http://[fe80::1]:2379"}, "", 5 * time.Second, false},
		{"etcd://app:" + secret + "@h1:2379,h2", []string{"http://h1:2379", "http://h2:2379"}, "app", 5 * time.Second, false},
		{"etcd://app:" + secret + "@h?dial_timeout=2s", []string{"http://h:2379"}, "app", 2 * time.Second, false},
		{"etcd+https://e1.example:2379,e2.example:2379", []string{"https://e1.example:2379", "https://e2.example:2379"}, "", 5 * time.Second, true},
	} {
		cfg, shown, err := parseURL(tc.url)
		if strings.Contains(shown, secret) || !strings.HasPrefix(shown, "etcd") {
			t.Errorf("parseURL shows %q", shown)
		}
		if err != nil {
			t.Errorf("parseURL(%s): %v", store.RedactURL(tc.url), err)
			continue
		}
		if !slices.Equal(cfg.Endpoints, tc.endpoints) || cfg.Username != tc.user || cfg.DialTimeout != tc.dial || (cfg.TLS != nil) != tc.tls {
			t.Errorf("parseURL(%s) = endpoints %v user %q dial %v tls %t; want %v %q %v %t",
				store.RedactURL(tc.url), cfg.Endpoints, cfg.Username, cfg.DialTimeout, cfg.TLS != nil, tc.endpoints, tc.user, tc.dial, tc.tls)
		}
		if tc.user != "" && cfg.Password != secret {
			t.Errorf("parseURL(%s): password not passed to the client", store.RedactURL(tc.url))
		}
	}
}

// ClientConfig is Open's configuration, so a client built from it (with a
// dialer of its own) behaves as Open's: keep-alives on, client logging off.
func TestClientConfigIsTheConfigurationOpenDialsWith(t *testing.T) {
	cfg, err := ClientConfig("etcd://app:" + secret + "@h1:2379,h2")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Endpoints, []string{"http://h1:2379", "http://h2:2379"}) || cfg.Password != secret ||
		cfg.DialKeepAliveTime != 10*time.Second || cfg.DialKeepAliveTimeout != 5*time.Second || cfg.Logger == nil {
		t.Errorf("ClientConfig = endpoints %v, keep-alive %v/%v, logger %v; want Open's", cfg.Endpoints,
			cfg.DialKeepAliveTime, cfg.DialKeepAliveTimeout, cfg.Logger)
	}
	if _, err := ClientConfig("etcd://u:" + secret + "@h:99999"); !errors.Is(err, store.ErrInvalidURL) || strings.Contains(err.Error(), secret) {
		t.Errorf("bad port: %v, want store.ErrInvalidURL without the password", err)
	}
}

func TestTLSFilesAreLoaded(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{
		"etcd+https://h?ca_file=" + ca,
		"etcd+https://h?ca_file=" + filepath.Join(dir, "missing.pem"),
		"etcd+https://h?cert_file=" + ca + "&key_file=" + ca,
	} {
		if _, _, err := parseURL(u); !errors.Is(err, store.ErrInvalidURL) {
			t.Errorf("parseURL(%s): %v, want store.ErrInvalidURL", u, err)
		}
	}
}

func TestMalformedURLsAreRejectedWithoutShowingThePassword(t *testing.T) {
	storetest.CheckOpenRefuses(t, openURL, map[string]string{
		"no host":              "etcd://u:" + secret + "@",
		"other scheme":         "redis://u:" + secret + "@h:2379",
		"no scheme":            "u:" + secret + "@h:2379",
		"bad port":             "etcd://u:" + secret + "@h:99999",
		"bad port in a list":   "etcd://u:" + secret + "@h:1,g:x",
		"user without a pass":  "etcd://u@h",
		"pass without a user":  "etcd://:" + secret + "@h",
		"path":                 "etcd://u:" + secret + "@h/tenure",
		"zero dial timeout":    "etcd://u:" + secret + "@h?dial_timeout=0s",
		"unknown parameter":    "etcd://u:" + secret + "@h?dial_timout=1s",
		"repeated parameter":   "etcd://u:" + secret + "@h?dial_timeout=1s&dial_timeout=2s",
		"TLS files over http":  "etcd://u:" + secret + "@h?ca_file=/etc/ssl/ca.pem",
		"cert without key":     "etcd+https://u:" + secret + "@h?cert_file=/c.pem",
		"unparsable":           "etcd://u:" + secret + "@h:2379/%zz",
		"control character":    "etcd://u:" + secret + "@h\n:2379",
		"empty endpoint":       "etcd://u:" + secret + "@h,,g",
		"opaque":               "etcd:u:" + secret + "@h",
		"fragment":             "etcd://u:" + secret + "@h#x",
		"endpoint with a path": "etcd://u:" + secret + "@h:2379,g/x:2379",
	}, store.ErrInvalidURL, secret)
}

// openURL opens and closes a store on rawURL, for the tests of Open's
// errors.
func openURL(ctx context.Context, rawURL string) error {
	s, err := Open(ctx, rawURL, Options{})
	if err == nil {
		s.Close()
	}
	return err
}

func TestOpenAgainstAClosedPortFailsWithinItsDialTimeout(t *testing.T) {
	addr := testenv.ClosedAddr(t)
	for _, u := range []string{
		"etcd://" + addr + "?dial_timeout=1s",
		"etcd://app:" + secret + "@" + addr + "?dial_timeout=1s", // authenticates while dialling
	} {
		start := time.Now()
		s, err := Open(context.Background(), u, Options{})
		if err == nil {
			s.Close()
			t.Fatalf("Open(%s) worked", store.RedactURL(u))
		}
		took := time.Since(start)
		storetest.CheckNoSecret(t, err, secret)
		if took > 3*time.Second {
			t.Errorf("Open(%s) took %v to fail with dial_timeout=1s", store.RedactURL(u), took)
		}
		if !strings.Contains(err.Error(), addr) {
			t.Errorf("the error does not name the address: %v", err)
		}
		t.Logf("%v after %v", err, took.Round(time.Millisecond))
	}
	// The caller's own deadline bounds it too.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if s, err := Open(ctx, "etcd://"+addr, Options{}); err == nil {
		s.Close()
		t.Fatal("Open worked")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Open with a 300ms ctx took %v", took)
	}
}

func TestOpenChecksThePrefixBeforeDialling(t *testing.T) {
	_, err := Open(context.Background(), "etcd://"+testenv.ClosedAddr(t), Options{Prefix: "no-dashes"})
	if !errors.Is(err, store.ErrInvalidName) {
		t.Fatalf("Open with a bad prefix: %v, want store.ErrInvalidName", err)
	}
}

// etcdServer is an etcd process owned by one test, never the shared one.
type etcdServer struct {
	url string
	cmd *exec.Cmd
}

// startEtcd starts an etcd of the test's own, with extra flags.
func startEtcd(t *testing.T, flags ...string) *etcdServer {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		testenv.Unavailable(t, "etcd binary not found on PATH; install etcd-server to run this test")
	}
	client, peer := testenv.ClosedAddr(t), testenv.ClosedAddr(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "--name", "t", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", "http://"+client, "--advertise-client-urls", "http://"+client,
		"--listen-peer-urls", "http://"+peer, "--initial-advertise-peer-urls", "http://"+peer,
		"--initial-cluster", "t=http://"+peer)
	cmd.Args = append(cmd.Args, flags...)
	logf, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting etcd: %v", err)
	}
	srv := &etcdServer{url: "etcd://" + client, cmd: cmd}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s, err := Open(ctx, srv.url+"?dial_timeout=1s", Options{})
		cancel()
		if err == nil {
			s.Close()
			return srv
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "etcd.log"))
			t.Fatalf("etcd on %s did not answer: %v\n%s", client, err, log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// enableAuth creates root with the given password and turns auth on.
func (e *etcdServer) enableAuth(t *testing.T, password string) {
	t.Helper()
	c := clientOf(t, e.url)
	ctx := testenv.Context(t)
	for _, step := range []func() error{
		func() error { _, err := c.UserAdd(ctx, "root", password); return err },
		func() error { _, err := c.RoleAdd(ctx, "root"); return err },
		func() error { _, err := c.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := c.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("enabling auth: %v", err)
		}
	}
}

func TestPasswordsAreCheckedAndNeverShown(t *testing.T) {
	srv := startEtcd(t)
	srv.enableAuth(t, secret)
	host := strings.TrimPrefix(srv.url, "etcd://")

	ctx := testenv.Context(t)
	wrong := "etcd://root:" + secret + "-not@" + host + "?dial_timeout=2s"
	if s, err := Open(ctx, wrong, Options{}); err == nil {
		s.Close()
		t.Fatal("Open with a wrong password worked")
	} else {
		storetest.CheckNoSecret(t, err, secret)
		if !strings.Contains(err.Error(), "authentication failed") {
			t.Errorf("the error does not say what is wrong: %v", err)
		}
		t.Log(err)
	}
	if s, err := Open(ctx, "etcd://"+host+"?dial_timeout=2s", Options{}); err == nil {
		s.Close()
		t.Fatal("Open without a password on a server with auth worked")
	} else {
		t.Log(err)
	}

	s, err := Open(ctx, "etcd://root:"+secret+"@"+host, Options{})
	if err != nil {
		storetest.CheckNoSecret(t, err, secret)
		t.Fatalf("Open with the right password: %v", err)
	}
	defer s.Close()
	epoch := testenv.MustAcquire(t, s, "job", "a", 5*time.Second, time.Second)
	if ok := testenv.Renew(t, s, "a", 5*time.Second, store.RenewItem{Key: "job", Epoch: epoch}); !ok[0] {
		t.Fatal("renewal refused")
	}
	if ls, err := s.List(ctx, ""); err != nil || len(ls) != 1 || !ls[0].Live {
		t.Fatalf("List = %+v, %v", ls, err)
	}
}

// With auth off, etcd answers a login with "auth not enabled", which the
// client ignores: a URL with credentials still works.
func TestCredentialsAreHarmlessOnAServerWithoutAuth(t *testing.T) {
	u := testenv.Etcd.URL(t)
	withUser := strings.Replace(u, "etcd://", "etcd://app:"+secret+"@", 1)
	s, err := Open(testenv.Context(t), withUser, Options{Prefix: randomPrefix()})
	if err != nil {
		storetest.CheckNoSecret(t, err, secret)
		t.Fatal(err)
	}
	defer dropNamespace(t, s.prefix)
	defer s.Close()
	testenv.MustAcquire(t, s, "job", "a", time.Minute, 0)
}

func TestRedactedURLsShowNoPassword(t *testing.T) {
	u := fmt.Sprintf("etcd://app:%s@h1:2379,h2:2379?dial_timeout=%s", secret, strconv.Itoa(2)+"s")
	if got := store.RedactURL(u); strings.Contains(got, secret) || !strings.Contains(got, "h2:2379") {
		t.Fatalf("RedactURL = %q", got)
	}
}
