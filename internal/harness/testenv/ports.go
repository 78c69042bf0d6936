package testenv

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

// A private server's port is chosen free and bound by the server a moment
// later, or seconds later when its data must be made first (initdb, a base
// backup); anything may bind it meanwhile, an outgoing connection's local
// port or another test's server. onFreePort starts a server with start
// and, when it failed because an address it was given was taken, moves it
// to free ports with move and starts it again, up to three times. Any
// other failure, or a third taken address, is returned as it is.
func onFreePort(start, move func() error) error {
	for attempt := 1; ; attempt++ {
		err := start()
		if err == nil || attempt == 3 || !addrInUse(err) {
			return err
		}
		if err := move(); err != nil {
			return err
		}
	}
}

// addrInUse reports whether err says a server could not bind its address:
// PostgreSQL and Redis log "Address already in use", Go servers such as
// etcd "bind: address already in use".
func addrInUse(err error) bool {
	return strings.Contains(strings.ToLower(err.Error()), "address already in use")
}

// pickPort returns a TCP port on 127.0.0.1 with nothing listening now.
func pickPort() (int, error) {
	addr, err := closedAddr()
	if err != nil {
		return 0, err
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(port)
}

// freePort is pickPort for a test, which fails if no port can be had.
func freePort(t testing.TB) int {
	t.Helper()
	port, err := pickPort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}
