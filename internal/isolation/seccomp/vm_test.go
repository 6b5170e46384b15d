package seccomp

import (
	"encoding/binary"
	"slices"
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
	return runOn(t, newVM(t, prog), archID, nr, args...)
}

// newVM loads prog in a BPF VM.
func newVM(t testing.TB, prog *Program) *bpf.VM {
	t.Helper()
	var ins []bpf.Instruction
	for _, r := range prog.Instructions() {
		ins = append(ins, r.Disassemble())
	}
	vm, err := bpf.NewVM(ins)
	if err != nil {
		t.Fatalf("the filter does not load in a VM: %v", err)
	}
	return vm
}

// runOn is run on a program already in vm.
func runOn(t testing.TB, vm *bpf.VM, archID uint32, nr uint32, args ...uint64) uint32 {
	t.Helper()
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
		{"ioctl", []uint64{0, 1<<32 | unix.TIOCSTI}, eperm},                                  // high bits the kernel ignores
		{"ioctl", []uint64{3, 0x5000940e}, eperm}, {"ioctl", []uint64{3, 0x50009418}, eperm}, // btrfs subvolume create
		{"ioctl", []uint64{3, 0x50009401}, eperm}, {"ioctl", []uint64{3, 0x50009417}, eperm}, // btrfs snapshot
		{"ioctl", []uint64{3, 0x5000940f}, eperm}, {"ioctl", []uint64{3, 0x5000943f}, eperm}, // btrfs subvolume delete
		{"ioctl", []uint64{3, 0x4008941a}, eperm}, {"ioctl", []uint64{3, 1<<32 | 0x5000940e}, eperm},
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
		// Reflinks share btrfs's ioctl type and stay.
		{"ioctl", []uint64{3, unix.FICLONE}, allow}, {"ioctl", []uint64{3, unix.FICLONERANGE}, allow},
		{"ioctl", []uint64{3, unix.FIDEDUPERANGE}, allow},
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
		for _, r := range btrfsSubvolumeRules {
			if got := run(t, prog, x86ID, nr(t, "ioctl"), 3, r.Args[0].Value); got == allow {
				t.Fatalf("profile %s allows ioctl %#x, of the floor", js, r.Args[0].Value)
			}
		}
	})
}

// verdict is what rules decide for syscall nr with args, read straight off
// the rules: the first naming nr whose conditions all hold, else allow.
func verdict(t *testing.T, info *arch.Info, rules []Rule, nr uint32, args []uint64) uint32 {
	t.Helper()
	for _, r := range rules {
		if !slices.ContainsFunc(r.Names, func(n string) bool { return uint32(info.SyscallNames[n]) == nr }) {
			continue
		}
		holds := true
		for _, a := range r.Args {
			v := args[a.Index]
			switch a.Op {
			case "eq":
				holds = holds && v == a.Value
			case "ne":
				holds = holds && v != a.Value
			case "eq32":
				holds = holds && uint32(v) == uint32(a.Value)
			case "ne32":
				holds = holds && uint32(v) != uint32(a.Value)
			case "bits_set":
				holds = holds && v&a.Value != 0
			case "bits_clear":
				holds = holds && v&a.Value == 0
			default:
				t.Fatalf("op %q", a.Op)
			}
		}
		if holds {
			ret, err := action(r)
			if err != nil {
				t.Fatal(err)
			}
			return ret
		}
	}
	return allow
}

// The compiled program decides every syscall number, with arguments at and
// around every value the rules compare, as the rules read in order do: the
// built-in profiles, and one large enough that the binary search and a leaf
// need jumps beyond a conditional jump's reach.
func TestProgramMatchesRules(t *testing.T) {
	info, err := arch.GetInfo("")
	if err != nil {
		t.Fatal(err)
	}
	var every []string
	for name := range info.SyscallNames {
		every = append(every, name)
	}
	slices.Sort(every)
	large := Profile{Name: "large", Rules: []Rule{{Names: every, Args: []Arg{{Index: 0, Op: "eq32", Value: 7}}}}}
	for i := range 40 {
		large.Rules = append(large.Rules, Rule{Names: []string{"ioctl"}, Errno: "EACCES", Args: []Arg{
			{Index: 1, Op: "eq", Value: uint64(i)}, {Index: 2, Op: "ne", Value: 1}, {Index: 3, Op: "bits_clear", Value: 4},
		}})
	}
	large.Rules = append(large.Rules, Rule{Names: []string{"read", "write"}, Action: "kill_process", Args: []Arg{{Index: 0, Op: "eq", Value: 1<<32 | 2}}})
	for _, p := range append(slices.Clone(builtin), large) {
		prog, err := Compile(p)
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		rules := append(slices.Clone(floor.Rules), p.Rules...)
		values := []uint64{0, 1, 2, 4, 7, ^uint64(0), 1 << 32}
		for _, r := range rules {
			for _, a := range r.Args {
				values = append(values, a.Value, a.Value+1, a.Value-1, a.Value|1<<32, a.Value&0xffffffff)
			}
		}
		slices.Sort(values)
		values = slices.Compact(values)
		vm, checked := newVM(t, prog), 0
		for nr := uint32(0); nr < 512; nr++ {
			for _, v := range values {
				for _, args := range [][]uint64{{v, v, v, v, v, v}, {0, v, 0, 0, 0, 0}, {v, 0, 2, 0, 0, 0}} {
					if got, want := runOn(t, vm, x86ID, nr, args...), verdict(t, info, rules, nr, args); got != want {
						t.Fatalf("%s: syscall %d%#x = %#x, the rules say %#x", p.Name, nr, args, got, want)
					}
					checked++
				}
			}
		}
		t.Logf("%s: %d instructions, %d calls checked", p.Name, len(prog.Instructions()), checked)
	}
}

// steps counts the instructions the filter runs for syscall nr up to its
// verdict or its first load of an argument: the work of each call the kernel
// filters before its arguments matter, and, for every number, of the action
// cache it builds when a filter is attached (which stops at an argument
// load: the verdict of such a number is never cached).
func steps(t *testing.T, prog *Program, nr uint32) int {
	t.Helper()
	ins := prog.Instructions()
	var a uint32
	for pc, n := 0, 1; ; n++ {
		if pc >= len(ins) {
			t.Fatalf("syscall %d: ran off the end", nr)
		}
		switch in := ins[pc].Disassemble().(type) {
		case bpf.LoadAbsolute:
			if in.Off != offNR && in.Off != offArch {
				return n
			}
			a = map[uint32]uint32{offNR: nr, offArch: x86ID}[in.Off]
			pc++
		case bpf.Jump:
			pc += 1 + int(in.Skip)
		case bpf.JumpIf:
			var ok bool
			switch in.Cond {
			case bpf.JumpEqual:
				ok = a == in.Val
			case bpf.JumpNotEqual:
				ok = a != in.Val
			case bpf.JumpGreaterOrEqual:
				ok = a >= in.Val
			case bpf.JumpLessThan:
				ok = a < in.Val
			case bpf.JumpBitsSet:
				ok = a&in.Val != 0
			case bpf.JumpBitsNotSet:
				ok = a&in.Val == 0
			default:
				t.Fatalf("condition %v", in.Cond)
			}
			pc++
			if ok {
				pc += int(in.SkipTrue)
			} else {
				pc += int(in.SkipFalse)
			}
		case bpf.RetConstant:
			return n
		default:
			t.Fatalf("instruction %v", in)
		}
	}
}

// No call walks the whole rule list: the default profile's filter finds a
// syscall's rules by binary search. The kernel runs it once per syscall
// number on every attach (one per sandbox); linear, that was 150-190
// instructions a number and 0.23 ms a sandbox.
func TestDefaultPathLength(t *testing.T) {
	prog := compileDefault(t)
	longest, sum := 0, 0
	for nr := uint32(0); nr < 512; nr++ {
		n := steps(t, prog, nr)
		longest, sum = max(longest, n), sum+n
	}
	t.Logf("%d instructions; longest path %d, mean %.1f", len(prog.Instructions()), longest, float64(sum)/512)
	if longest > 24 {
		t.Errorf("a call runs %d instructions of the filter, want at most 24", longest)
	}
}
