// This file implements the spawner's network namespaces made ahead: a
// sandbox's init then joins one instead of making its own in its clone,
// whose setup_net (every subsystem's per-namespace state) was ~0.4-0.6 ms
// of a pool-off create's critical path. Each is made once, for one
// sandbox, and never handed to another: it is fresh, as one made at the
// clone would be.

package forker

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/isolation/nsinit"
)

// NetPoolSize is how many network namespaces the spawner keeps made ahead:
// enough for creates one after another (each take starts the next), not for
// a burst, whose creates beyond it make their own at the clone as before.
const NetPoolSize = 2

// netPool keeps up to size network namespaces, each as a descriptor of its
// nsfs file, made by a thread of the spawner's (in the spawner's own network
// namespace, so each reads its TCP hash size, ChildEhashEntries, from there).
// Such a namespace belongs to the spawner's user namespace, not to the
// sandbox's: its loopback is up and its unprivileged port floor is 0 before
// it is handed out (a sandbox's root, without capabilities over it, could set
// neither), and the sandbox's root has no say over its interfaces, routes or
// filters.
type netPool struct {
	size int
	kick chan struct{} // buffered 1: a namespace was taken

	mu    sync.Mutex
	ready []int // guarded by mu
	// broken says why namespaces cannot be made here; the pool then stays
	// empty and every clone makes its own.
	broken error // guarded by mu
}

// newNetPool starts the refill of a pool of size namespaces.
func newNetPool(size int) *netPool {
	p := &netPool{size: size, kick: make(chan struct{}, 1)}
	go p.refill()
	p.kick <- struct{}{}
	return p
}

// take returns a namespace's descriptor, which the caller closes, or -1
// when none is ready.
func (p *netPool) take() int {
	p.mu.Lock()
	n := len(p.ready)
	if n == 0 {
		p.mu.Unlock()
		return -1
	}
	fd := p.ready[n-1]
	p.ready = p.ready[:n-1]
	p.mu.Unlock()
	return fd
}

// refillSoon starts the refill, if the pool is short: called once the
// fork that took one was answered, so that the refill shares the CPUs with
// the new init's start, not with its clone and exec.
func (p *netPool) refillSoon() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// refill makes namespaces until the pool is full, each time it is kicked
// (refillSoon).
func (p *netPool) refill() {
	for range p.kick {
		for {
			p.mu.Lock()
			full := len(p.ready) >= p.size || p.broken != nil
			p.mu.Unlock()
			if full {
				break
			}
			fd, err := makeNet()
			p.mu.Lock()
			if err != nil {
				p.broken = err
				fmt.Fprintln(os.Stderr, "sbx spawner: network namespaces made ahead:", err)
			} else {
				p.ready = append(p.ready, fd)
			}
			p.mu.Unlock()
		}
	}
}

// makeNet makes a network namespace on a thread of its own, readies it
// (loopback up, ports below 1024 open to every user in it) and returns a
// descriptor of it. The thread ends with the goroutine: it is never
// unlocked, so no other goroutine runs in that namespace.
func makeNet() (int, error) {
	type result struct {
		fd  int
		err error
	}
	res := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := makeNetHere()
		res <- result{fd, err}
	}()
	r := <-res
	return r.fd, r.err
}

func makeNetHere() (int, error) {
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return -1, os.NewSyscallError("unshare", err)
	}
	fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: "/proc/thread-self/ns/net", Err: err}
	}
	if err := nsinit.LoopbackUp(); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("bringing lo up: %w", err)
	}
	// Binding a port below 1024 takes CAP_NET_BIND_SERVICE over the
	// namespace's owner, which the sandbox's root does not have here: the
	// floor goes to 0 (as container engines set it), so its servers bind
	// port 80 as they would in a namespace of its own.
	const floor = "/proc/sys/net/ipv4/ip_unprivileged_port_start"
	if err := os.WriteFile(floor, []byte("0"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// joinPooled moves the calling thread, which forks a child next and is
// thrown away after, into a namespace of the pool, and reports whether it
// did: the child, cloned without CLONE_NEWNET, is born there.
func (p *netPool) joinPooled() bool {
	if p == nil {
		return false
	}
	fd := p.take()
	if fd < 0 {
		return false
	}
	defer unix.Close(fd)
	return unix.Setns(fd, unix.CLONE_NEWNET) == nil
}
