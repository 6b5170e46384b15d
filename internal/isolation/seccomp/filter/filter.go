// Package filter is a compiled seccomp-bpf filter: carried between
// processes as bytes and loaded on one thread. It is what the agent needs of
// seccomp; the compiler and its syscall tables (package seccomp) stay with
// the daemon.
package filter

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// MaxInstructions is the kernel's bound on a filter's length.
const MaxInstructions = 4096

// Program is a compiled filter.
type Program struct {
	name string
	ins  []bpf.RawInstruction
}

// New returns the program of instructions ins, named name.
func New(name string, ins []bpf.RawInstruction) *Program {
	return &Program{name: name, ins: ins}
}

// ID names the program: "<name>@<first 12 hex digits of the SHA-256 of its
// instructions>".
func (p *Program) ID() string {
	sum := sha256.Sum256(p.Bytes())
	return p.name + "@" + hex.EncodeToString(sum[:6])
}

// Instructions returns the raw instructions.
func (p *Program) Instructions() []bpf.RawInstruction { return p.ins }

// Bytes is the program as struct sock_filter entries, 8 bytes each, in the
// host's byte order: what another process loads with FromBytes.
func (p *Program) Bytes() []byte {
	b := make([]byte, 0, 8*len(p.ins))
	for _, in := range p.ins {
		b = binary.NativeEndian.AppendUint16(b, in.Op)
		b = append(b, in.Jt, in.Jf)
		b = binary.NativeEndian.AppendUint32(b, in.K)
	}
	return b
}

// FromBytes reads a program made by Bytes.
func FromBytes(b []byte) (*Program, error) {
	if len(b) == 0 || len(b)%8 != 0 || len(b)/8 > MaxInstructions {
		return nil, fmt.Errorf("a filter of %d bytes is not 1 to %d instructions", len(b), MaxInstructions)
	}
	p := &Program{name: "loaded"}
	for i := 0; i < len(b); i += 8 {
		p.ins = append(p.ins, bpf.RawInstruction{
			Op: binary.NativeEndian.Uint16(b[i:]), Jt: b[i+2], Jf: b[i+3], K: binary.NativeEndian.Uint32(b[i+4:]),
		})
	}
	return p, nil
}

// LoadThread installs the filter on the calling thread only (no TSYNC). The
// caller holds runtime.LockOSThread, has set no_new_privs on the thread, and
// discards the thread afterwards: the filter stays with it, and with every
// process forked from it.
func (p *Program) LoadThread() error {
	prog := unix.SockFprog{Len: uint16(len(p.ins)), Filter: (*unix.SockFilter)(unsafe.Pointer(&p.ins[0]))}
	_, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(p)
	if errno != 0 {
		return fmt.Errorf("seccomp(SET_MODE_FILTER): %w", errno)
	}
	return nil
}
