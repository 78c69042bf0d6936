package testenv

import (
	"net"
	"os/exec"
	"testing"
	"time"
)

// TestAnEtcdClusterWhosePortWasTakenStartsOnAnother takes a member's peer
// port after the cluster chose it and before the member binds it, as an
// outgoing connection's local port or another test's server may: the
// cluster must come up on other ports rather than fail, or wait 30 s for
// a leader that cannot be elected.
func TestAnEtcdClusterWhosePortWasTakenStartsOnAnother(t *testing.T) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		Unavailable(t, "etcd binary not found on PATH; install etcd-server to run this test")
	}
	c := newEtcdCluster(t, bin, 3, nil)
	taken := c.members[1].peer
	ln, err := net.Listen("tcp", taken)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c.run(t)
	for _, m := range c.members {
		if m.peer == taken {
			t.Fatalf("member %s is on %s, which was taken", m.Name, taken)
		}
	}
	if _, err := c.WaitLeader(5 * time.Second); err != nil {
		t.Fatal(err)
	}
}
