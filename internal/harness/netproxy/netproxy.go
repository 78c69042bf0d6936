// Package netproxy is a TCP proxy that plays network faults on real
// connections between a client and a server: a partition, replies held
// back, added latency. The fault harness puts one between each replica and
// each store endpoint; store tests put one on a replication link.
package netproxy

import (
	"net"
	"sync"
	"time"
)

// Proxy is a TCP proxy between a client (a replica) and a server (the
// store), through which a test plays network faults on real connections:
//
//   - down: nothing gets through in either direction, new connections
//     hang; when it heals, every connection that lived through it is
//     closed, as a partition's broken TCP sessions would be;
//   - hold: requests reach the store and commit, replies are held back;
//     when it ends they are delivered late (to a client that has usually
//     given up on them);
//   - lose: requests reach the store and commit, and the first reply on a
//     connection is dropped and the connection cut: the client learns of a
//     failure at once, reconnects, and its next request commits unanswered
//     too, until the fault ends (a server or a middlebox that dies between
//     applying a write and answering it);
//   - delay: every chunk is delivered that much later, in each direction.
type Proxy struct {
	ln       net.Listener
	upstream string

	mu      sync.Mutex
	down    bool
	hold    bool
	lose    bool
	delay   time.Duration
	changed chan struct{} // closed and replaced on every change
	links   map[*link]bool
	closed  bool

	wg sync.WaitGroup
}

// link is one proxied connection.
type link struct {
	client, server net.Conn
	done           chan struct{}
	once           sync.Once
	partitioned    bool // lived through a partition; closed when it heals
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		l.client.Close()
		if l.server != nil {
			l.server.Close()
		}
	})
}

// Group is a replica's proxies, one per endpoint of the store (etcd's
// client keeps a connection to each member it was given): a network fault
// strikes them all at once, as a partition of the replica's host would.
type Group []*Proxy

func (ps Group) SetDown(down bool) {
	for _, p := range ps {
		p.SetDown(down)
	}
}

func (ps Group) SetHold(hold bool) {
	for _, p := range ps {
		p.SetHold(hold)
	}
}

func (ps Group) SetLose(lose bool) {
	for _, p := range ps {
		p.SetLose(lose)
	}
}

func (ps Group) SetDelay(d time.Duration) {
	for _, p := range ps {
		p.SetDelay(d)
	}
}

// Close closes every proxy.
func (ps Group) Close() {
	for _, p := range ps {
		p.Close()
	}
}

// New starts a proxy on a free loopback port that forwards to upstream.
func New(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, upstream: upstream, changed: make(chan struct{}), links: map[*link]bool{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the address clients dial instead of upstream.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Upstream is the address the proxy forwards to.
func (p *Proxy) Upstream() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.upstream
}

// SetUpstream forwards new connections to addr and closes the ones open
// now, as moving a virtual IP to another host would.
func (p *Proxy) SetUpstream(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.upstream = addr
	for l := range p.links {
		l.close()
	}
}

// Conns is how many client connections the proxy holds now.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	for l := range p.links {
		l.close()
	}
	p.broadcastLocked()
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

// SetDown cuts the store off (true) or heals the partition (false).
func (p *Proxy) SetDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	for l := range p.links {
		if down {
			l.partitioned = true
		} else if l.partitioned {
			l.close()
		}
	}
	p.broadcastLocked()
}

// SetHold holds replies back (true) or delivers them again (false).
func (p *Proxy) SetHold(hold bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold = hold
	p.broadcastLocked()
}

// SetLose drops replies and cuts their connections (true), or lets them
// through again (false).
func (p *Proxy) SetLose(lose bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lose = lose
	p.broadcastLocked()
}

// SetDelay sets the added one-way latency.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
	p.broadcastLocked()
}

func (p *Proxy) broadcastLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		l := &link{client: c, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return
		}
		p.links[l] = true
		l.partitioned = p.down
		p.mu.Unlock()
		p.wg.Go(func() { p.serve(l) })
	}
}

func (p *Proxy) serve(l *link) {
	defer func() {
		l.close()
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()
	// A connection opened during a partition hangs until it heals, and is
	// then closed like every connection that lived through it.
	if !p.await(l, false) {
		return
	}
	server, err := net.DialTimeout("tcp", p.Upstream(), 5*time.Second)
	if err != nil {
		return
	}
	p.mu.Lock()
	l.server = server
	p.mu.Unlock()
	select {
	case <-l.done: // closed while dialing
		server.Close()
		return
	default:
	}
	var pumps sync.WaitGroup
	pumps.Go(func() { p.pump(l, l.client, server, false) })
	pumps.Go(func() { p.pump(l, server, l.client, true) })
	pumps.Wait()
}

type chunk struct {
	b  []byte
	at time.Time
}

// pump copies src to dst through the proxy's faults. Reading and writing
// are separate goroutines so that added latency delays each chunk from the
// moment it arrived, instead of adding up.
func (p *Proxy) pump(l *link, src, dst net.Conn, reply bool) {
	chunks := make(chan chunk, 64)
	var reader sync.WaitGroup
	reader.Go(func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case chunks <- chunk{buf[:n], time.Now()}:
				case <-l.done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	})
	defer reader.Wait()
	defer l.close() // either side ending ends the link, and the reader with it
	for c := range chunks {
		if !p.await(l, reply) {
			return
		}
		p.mu.Lock()
		delay, lose := p.delay, reply && p.lose
		p.mu.Unlock()
		if lose {
			return // the request was applied; its answer never arrives
		}
		if wait := time.Until(c.at.Add(delay)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-l.done:
				t.Stop()
				return
			}
		}
		if _, err := dst.Write(c.b); err != nil {
			return
		}
	}
}

// await blocks while the proxy's faults stop this direction, and reports
// false when the link was closed meanwhile.
func (p *Proxy) await(l *link, reply bool) bool {
	for {
		p.mu.Lock()
		blocked := p.down || reply && p.hold
		changed := p.changed
		p.mu.Unlock()
		if !blocked {
			select {
			case <-l.done:
				return false
			default:
				return true
			}
		}
		select {
		case <-changed:
		case <-l.done:
			return false
		}
	}
}
