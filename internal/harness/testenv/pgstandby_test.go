package testenv

import (
	"net"
	"strconv"
	"testing"
)

// TestAPairNodeWhosePortWasTakenStartsOnAnother takes the port of the
// primary a failover killed, as an outgoing connection's local port or
// another test's server may between the pair choosing a port and the
// server binding it, and rejoins it as a standby: it must come up on
// another port, its link following, and stream from the new primary.
func TestAPairNodeWhosePortWasTakenStartsOnAnother(t *testing.T) {
	pair := StartPostgresPair(t, Async)
	if err := pair.Failover(); err != nil {
		t.Fatal(err)
	}
	old := pair.nodes[1-pair.primary]
	taken := old.port
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(taken))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := pair.Rejoin(); err != nil { // waits until the standby streams
		t.Fatal(err)
	}
	if old.port == taken {
		t.Fatalf("the rejoined node is on :%d, which was taken", taken)
	}
	if up := pair.links[1-pair.primary].Upstream(); up != "127.0.0.1:"+strconv.Itoa(old.port) {
		t.Errorf("its link forwards to %s, not to its new port %d", up, old.port)
	}
}
