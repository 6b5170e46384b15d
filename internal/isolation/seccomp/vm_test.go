package seccomp

import (
	"encoding/binary"
	"strings"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/elastic/go-seccomp-bpf/arch"
)

const auditArchI386 = 0x40000003

// run evaluates prog on a call of nr with args under audit architecture
// archID, as the kernel would, and returns the filter's verdict. The VM
// reads 32-bit words big-endian where the kernel reads them in the host's
// order, so each word goes in big-endian at its kernel offset.
func run(t testing.TB, prog *Program, archID uint32, nr uint32, args ...uint64) uint32 {
	t.Helper()
	var ins []bpf.Instruction
	for _, r := range prog.Instructions() {
		ins = append(ins, r.Disassemble())
	}
	vm, err := bpf.NewVM(ins)
	if err != nil {
		t.Fatalf("the filter does not load in a VM: %v", err)
	}
	pkt := make([]byte, 64)
	binary.BigEndian.PutUint32(pkt[0:], nr)
	binary.BigEndian.PutUint32(pkt[4:], archID)
	for i, a := range args {
		lo, hi := 16+8*i, 20+8*i
		if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
			lo, hi = hi, lo
		}
		binary.BigEndian.PutUint32(pkt[lo:], uint32(a))
		binary.BigEndian.PutUint32(pkt[hi:], uint32(a>>32))
	}
	v, err := vm.Run(pkt)
	if err != nil {
		t.Fatalf("VM: %v", err)
	}
	return uint32(v)
}

func nr(t testing.TB, name string) uint32 {
	t.Helper()
	info, err := arch.GetInfo("")
	if err != nil {
		t.Fatal(err)
	}
	n, ok := info.SyscallNames[name]
	if !ok {
		t.Fatalf("no syscall %s", name)
	}
	return uint32(n)
}

const (
	allow   = unix.SECCOMP_RET_ALLOW
	kill    = unix.SECCOMP_RET_KILL_PROCESS
	eperm   = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	enosys  = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	x86ID   = 0xc000003e
	newUser = unix.CLONE_NEWUSER
)

func compileDefault(t testing.TB) *Program {
	t.Helper()
	p, err := Lookup("default")
	if err != nil {
		t.Fatal(err)
	}
	prog, err := Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	return prog
}

func TestDefaultVerdicts(t *testing.T) {
	prog := compileDefault(t)
	for _, c := range []struct {
		name string
		args []uint64
		want uint32
	}{
		// Denied.
		{"mount", nil, eperm}, {"umount2", nil, eperm}, {"pivot_root", nil, eperm}, {"move_mount", nil, eperm},
		{"open_tree", nil, eperm}, {"fsopen", nil, eperm}, {"mount_setattr", nil, eperm},
		{"keyctl", nil, eperm}, {"add_key", nil, eperm}, {"request_key", nil, eperm},
		{"bpf", nil, eperm}, {"perf_event_open", nil, eperm}, {"userfaultfd", nil, eperm},
		{"kexec_load", nil, eperm}, {"kexec_file_load", nil, eperm},
		{"init_module", nil, eperm}, {"finit_module", nil, eperm}, {"delete_module", nil, eperm},
		{"open_by_handle_at", nil, eperm}, {"name_to_handle_at", nil, eperm},
		{"io_uring_setup", nil, enosys}, {"io_uring_enter", nil, enosys}, {"io_uring_register", nil, enosys},
		{"unshare", []uint64{newUser}, eperm}, {"unshare", []uint64{unix.CLONE_NEWNS | unix.CLONE_FS}, eperm},
		{"unshare", []uint64{unix.CLONE_NEWNET}, eperm}, {"unshare", []uint64{unix.CLONE_NEWTIME}, eperm},
		{"clone", []uint64{uint64(unix.SIGCHLD) | newUser}, eperm}, {"clone", []uint64{unix.CLONE_NEWPID}, eperm},
		{"clone3", []uint64{0x1000, 88, 0x7f0000001000}, enosys}, {"setns", nil, eperm},
		{"personality", []uint64{8}, eperm}, {"personality", []uint64{0x0040000}, eperm},
		{"reboot", nil, eperm}, {"swapon", nil, eperm}, {"swapoff", nil, eperm},
		{"settimeofday", nil, eperm}, {"clock_settime", nil, eperm}, {"clock_adjtime", nil, eperm},
		{"acct", nil, eperm}, {"syslog", nil, eperm}, {"quotactl", nil, eperm}, {"fanotify_init", nil, eperm},
		{"iopl", nil, eperm}, {"ioperm", nil, eperm},
		{"ioctl", []uint64{0, unix.TIOCSTI}, eperm}, {"ioctl", []uint64{0, unix.TIOCLINUX}, eperm},
		{"ioctl", []uint64{0, 1<<32 | unix.TIOCSTI}, eperm}, // high bits the kernel ignores
		// Allowed.
		{"read", nil, allow}, {"write", nil, allow}, {"openat", nil, allow}, {"execve", nil, allow},
		{"clone", []uint64{uint64(unix.SIGCHLD)}, allow},
		{"clone", []uint64{unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD | unix.CLONE_SYSVSEM | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID}, allow},
		{"clone3", []uint64{0x1000, 88, 0}, allow}, // Go's runtime, starting a child in its cgroup
		{"unshare", []uint64{unix.CLONE_FILES | unix.CLONE_FS}, allow},
		{"mmap", []uint64{0, 4096, unix.PROT_READ | unix.PROT_WRITE | unix.PROT_EXEC, unix.MAP_PRIVATE | unix.MAP_ANONYMOUS}, allow},
		{"mprotect", []uint64{0, 4096, unix.PROT_READ | unix.PROT_WRITE | unix.PROT_EXEC}, allow},
		{"personality", []uint64{0}, allow}, {"personality", []uint64{0xffffffff}, allow},
		{"ptrace", nil, allow}, {"process_vm_readv", nil, allow}, {"adjtimex", nil, allow},
		{"ioctl", []uint64{0, unix.TCGETS}, allow}, {"getpid", nil, allow}, {"kcmp", nil, allow},
	} {
		if got := run(t, prog, x86ID, nr(t, c.name), c.args...); got != c.want {
			t.Errorf("%s(%#x) = %#x, want %#x", c.name, c.args, got, c.want)
		}
	}
	// Another ABI is killed whatever the call, the x32 numbers too.
	for _, n := range []uint32{0, 1, 20, 39, 165} {
		if got := run(t, prog, auditArchI386, n); got != kill {
			t.Errorf("i386 call %d = %#x, want kill", n, got)
		}
	}
	if got := run(t, prog, x86ID, nr(t, "getpid")|x32Bit); got != kill {
		t.Errorf("x32 getpid = %#x, want kill", got)
	}
}

func TestNestedUserNS(t *testing.T) {
	p, err := Lookup("nested-userns")
	if err != nil {
		t.Fatal(err)
	}
	prog, err := Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := run(t, prog, x86ID, nr(t, "unshare"), newUser|unix.CLONE_NEWNS); got != allow {
		t.Errorf("nested-userns: unshare(NEWUSER|NEWNS) = %#x, want allow", got)
	}
	if got := run(t, prog, x86ID, nr(t, "mount")); got != eperm {
		t.Errorf("nested-userns: mount = %#x, want EPERM (the floor)", got)
	}
}

func TestProfileErrors(t *testing.T) {
	t.Cleanup(func() { mu.Lock(); delete(profiles, "loop-a"); delete(profiles, "loop-b"); mu.Unlock() })
	for _, c := range []struct {
		p    Profile
		want string
	}{
		{Profile{Name: "x", Rules: []Rule{{Names: []string{"no_such_call"}}}}, `unknown syscall "no_such_call"`},
		{Profile{Name: "x", Rules: []Rule{{Names: []string{"read"}, Errno: "EWHAT"}}}, `errno: "EWHAT"`},
		{Profile{Name: "x", Rules: []Rule{{Names: []string{"read"}, Action: "allow"}}}, `action: "allow"`},
		{Profile{Name: "x", Rules: []Rule{{Names: []string{"read"}, Args: []Arg{{Index: 6, Op: "eq"}}}}}, "index 6"},
		{Profile{Name: "x", Rules: []Rule{{Names: []string{"read"}, Args: []Arg{{Op: "lt"}}}}}, `op "lt"`},
		{Profile{Name: "x", Extends: "nope"}, `unknown seccomp profile "nope"`},
		{Profile{Name: "x", Rules: []Rule{{}}}, "names: empty"},
		{Profile{}, "no name"},
	} {
		_, err := Compile(c.p)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Compile(%+v) = %v, want an error with %q", c.p, err, c.want)
		}
	}
	mu.Lock()
	profiles["loop-a"] = Profile{Name: "loop-a", Extends: "loop-b"}
	profiles["loop-b"] = Profile{Name: "loop-b", Extends: "loop-a"}
	mu.Unlock()
	if _, err := Compile(Profile{Name: "loop-a", Extends: "loop-b"}); err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Errorf("a cycle compiled: %v", err)
	}
	if err := Register(Profile{Name: "default"}); err == nil {
		t.Errorf("Register over a built-in succeeded")
	}
}

func TestBytesRoundTrip(t *testing.T) {
	prog := compileDefault(t)
	back, err := FromBytes(prog.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Instructions()) != len(prog.Instructions()) {
		t.Fatalf("%d instructions back from %d", len(back.Instructions()), len(prog.Instructions()))
	}
	for i := range back.Instructions() {
		if back.Instructions()[i] != prog.Instructions()[i] {
			t.Fatalf("instruction %d: %v, want %v", i, back.Instructions()[i], prog.Instructions()[i])
		}
	}
	if _, err := FromBytes(make([]byte, 7)); err == nil {
		t.Errorf("FromBytes of 7 bytes succeeded")
	}
}

// floorCalls must never be allowed, whatever the profile.
var floorCalls = floor.Rules[0].Names

// FuzzCompile feeds arbitrary profiles to the compiler: whatever compiles
// kills foreign ABIs and denies the floor.
func FuzzCompile(f *testing.F) {
	for _, p := range builtin {
		js, _ := jsonMarshal(p)
		f.Add(js)
	}
	f.Add([]byte(`{"name":"x","rules":[{"names":["read"],"args":[{"index":0,"op":"ne","value":1}]}]}`))
	f.Add([]byte(`{"name":"x","rules":[{"names":["mount"],"action":"kill_process"}]}`))
	f.Fuzz(func(t *testing.T, js []byte) {
		p, err := Parse(js)
		if err != nil {
			return
		}
		prog, err := Compile(p)
		if err != nil {
			return
		}
		if got := run(t, prog, auditArchI386, 1); got == allow {
			t.Fatalf("profile %s allows a foreign ABI", js)
		}
		for _, name := range floorCalls {
			if got := run(t, prog, x86ID, nr(t, name)); got == allow {
				t.Fatalf("profile %s allows %s, of the floor", js, name)
			}
		}
	})
}
