package seccomp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/elastic/go-seccomp-bpf/arch"

	"sbx.dev/sbx/internal/isolation/seccomp/filter"
)

// seccomp_data offsets.
const (
	offNR   = 0
	offArch = 4
	offArgs = 16
)

// x32Bit marks x32 syscall numbers on x86_64.
const x32Bit = 0x40000000

// maxRules bounds a profile chain: the kernel takes at most 4096
// instructions, and each condition costs a few.
const maxRules = 256

// Program is a compiled filter.
type Program = filter.Program

// FromBytes reads a program made by Program.Bytes.
func FromBytes(b []byte) (*Program, error) { return filter.FromBytes(b) }

// Compile turns p into a filter: the architecture check, the floor, the
// rules of the profiles p extends (outermost first), p's rules, then allow.
func Compile(p Profile) (*Program, error) {
	if p.Name == "" {
		return nil, errors.New("seccomp profile: no name")
	}
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp profile %q: %w", p.Name, err)
	}
	chain := []Profile{p}
	for cur := p; cur.Extends != ""; {
		if slices.ContainsFunc(chain, func(c Profile) bool { return c.Name == cur.Extends }) {
			return nil, fmt.Errorf("seccomp profile %q: extends: a cycle through %q", p.Name, cur.Extends)
		}
		next, err := Lookup(cur.Extends)
		if err != nil {
			return nil, fmt.Errorf("seccomp profile %q: extends: %w", cur.Name, err)
		}
		chain = append(chain, next)
		cur = next
	}
	var rules []Rule
	rules = append(rules, floor.Rules...)
	for i := len(chain) - 1; i >= 0; i-- {
		rules = append(rules, chain[i].Rules...)
	}
	if len(rules) > maxRules {
		return nil, fmt.Errorf("seccomp profile %q: %d rules, at most %d", p.Name, len(rules), maxRules)
	}
	var ins []bpf.Instruction
	// The architecture: anything but the native ABI is killed.
	ins = append(ins,
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_KILL_PROCESS},
		bpf.LoadAbsolute{Off: offNR, Size: 4},
	)
	if info.ID == arch.X86_64.ID {
		ins = append(ins,
			bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32Bit, SkipFalse: 1},
			bpf.RetConstant{Val: unix.SECCOMP_RET_KILL_PROCESS},
		)
	}
	l := leaves{body: map[uint32][]bpf.Instruction{}, decided: map[uint32]bool{}}
	for i, r := range rules {
		if err := compileRule(info, r, l); err != nil {
			where := p.Name
			if i < len(floor.Rules) {
				where = "floor"
			}
			return nil, fmt.Errorf("seccomp profile %q: rule %d (%s): %w", p.Name, i+1, where, err)
		}
	}
	for nr := range l.body {
		if !l.decided[nr] { // every condition failed: A no longer holds the number
			l.body[nr] = append(l.body[nr], bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW})
		}
	}
	ins = append(ins, dispatch(slices.Sorted(maps.Keys(l.body)), l.body)...)
	raw, err := bpf.Assemble(ins)
	if err != nil {
		return nil, fmt.Errorf("seccomp profile %q: %w", p.Name, err)
	}
	if len(raw) > filter.MaxInstructions {
		return nil, fmt.Errorf("seccomp profile %q: %d instructions, the kernel takes 4096", p.Name, len(raw))
	}
	return filter.New(p.Name, raw), nil
}

// leaves are the syscalls rules name, each with its rules' bodies in order
// (argument conditions, then the action).
type leaves struct {
	body map[uint32][]bpf.Instruction
	// decided: a rule without conditions names the syscall; no later rule
	// can be reached.
	decided map[uint32]bool
}

// compileRule adds r's body to the leaf of each syscall it names. A failed
// condition skips to just past the body's return: on to the next rule
// naming the same syscall, or to the allow Compile ends the leaf with.
func compileRule(info *arch.Info, r Rule, l leaves) error {
	if len(r.Names) == 0 {
		return errors.New("names: empty")
	}
	ret, err := action(r)
	if err != nil {
		return err
	}
	var cond []bpf.Instruction
	for _, a := range r.Args {
		c, err := condition(a)
		if err != nil {
			return err
		}
		cond = append(cond, c...)
	}
	for _, name := range r.Names {
		nr, ok := info.SyscallNames[name]
		if !ok {
			return fmt.Errorf("names: unknown syscall %q on %s", name, info.Name)
		}
		key := uint32(nr | info.SeccompMask)
		if l.decided[key] {
			continue
		}
		l.body[key] = append(l.body[key], fixSkips(append(slices.Clone(cond), bpf.RetConstant{Val: ret}))...)
		l.decided[key] = len(cond) == 0
	}
	return nil
}

// linearLeaves is how many syscalls dispatch compares one by one; above it,
// it splits the numbers in halves.
const linearLeaves = 4

// dispatch finds the leaf of the syscall number in A among nrs (sorted) by
// binary search, and allows any number not among them. A linear filter
// (load the number, compare, next rule) costs every allowed call a pass over
// every rule, and the kernel pays that pass for each syscall number when a
// filter is attached: it runs the filter on every number to find those it
// may allow without running it (seccomp's action cache), with interrupts
// off. For the default profile that was 0.23 ms a sandbox.
func dispatch(nrs []uint32, leaves map[uint32][]bpf.Instruction) []bpf.Instruction {
	if len(nrs) <= linearLeaves {
		var out []bpf.Instruction
		for _, nr := range nrs {
			leaf := leaves[nr]
			if len(leaf) <= maxSkip {
				out = append(out, bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: nr, SkipTrue: uint8(len(leaf))})
			} else {
				out = append(out, bpf.JumpIf{Cond: bpf.JumpEqual, Val: nr, SkipTrue: 1}, bpf.Jump{Skip: uint32(len(leaf))})
			}
			out = append(out, leaf...)
		}
		return append(out, bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW})
	}
	mid := len(nrs) / 2
	left, right := dispatch(nrs[:mid], leaves), dispatch(nrs[mid:], leaves)
	var out []bpf.Instruction
	if len(left) <= maxSkip {
		out = append(out, bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: nrs[mid], SkipTrue: uint8(len(left))})
	} else {
		out = append(out,
			bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: nrs[mid], SkipFalse: 1},
			bpf.Jump{Skip: uint32(len(left))})
	}
	return append(append(out, left...), right...)
}

// maxSkip is the farthest a conditional jump reaches; farther takes a jump
// of its own.
const maxSkip = 255

// skipToEnd marks, in a condition's JumpIf, the branch that leaves the
// block; fixSkips turns it into the distance to the block's end.
const skipToEnd = 0xff

func fixSkips(body []bpf.Instruction) []bpf.Instruction {
	for i, in := range body {
		j, ok := in.(bpf.JumpIf)
		if !ok {
			continue
		}
		toEnd := uint8(len(body) - i - 1)
		if j.SkipTrue == skipToEnd {
			j.SkipTrue = toEnd
		}
		if j.SkipFalse == skipToEnd {
			j.SkipFalse = toEnd
		}
		body[i] = j
	}
	return body
}

// condition checks argument a, falling through when it holds and leaving the
// block (skipToEnd) when it does not.
func condition(a Arg) ([]bpf.Instruction, error) {
	if a.Index > 5 {
		return nil, fmt.Errorf("args: index %d: a syscall has 6 arguments", a.Index)
	}
	lo := bpf.LoadAbsolute{Off: offArgs + 8*a.Index, Size: 4}
	hi := bpf.LoadAbsolute{Off: offArgs + 8*a.Index + 4, Size: 4}
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 { // big-endian host
		lo.Off, hi.Off = hi.Off, lo.Off
	}
	vlo, vhi := uint32(a.Value), uint32(a.Value>>32)
	op := a.Op
	if (op == "eq32" || op == "ne32") && vhi != 0 {
		op = "" // reported below
	}
	switch op {
	case "eq": // hi == vhi && lo == vlo
		return []bpf.Instruction{
			hi, bpf.JumpIf{Cond: bpf.JumpEqual, Val: vhi, SkipFalse: skipToEnd},
			lo, bpf.JumpIf{Cond: bpf.JumpEqual, Val: vlo, SkipFalse: skipToEnd},
		}, nil
	case "ne": // hi != vhi || lo != vlo
		return []bpf.Instruction{
			hi, bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: vhi, SkipTrue: 2},
			lo, bpf.JumpIf{Cond: bpf.JumpEqual, Val: vlo, SkipTrue: skipToEnd},
		}, nil
	case "eq32":
		return []bpf.Instruction{lo, bpf.JumpIf{Cond: bpf.JumpEqual, Val: vlo, SkipFalse: skipToEnd}}, nil
	case "ne32":
		return []bpf.Instruction{lo, bpf.JumpIf{Cond: bpf.JumpEqual, Val: vlo, SkipTrue: skipToEnd}}, nil
	case "bits_set": // (hi & vhi) != 0 || (lo & vlo) != 0
		return []bpf.Instruction{
			hi, bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: vhi, SkipTrue: 2},
			lo, bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: vlo, SkipFalse: skipToEnd},
		}, nil
	case "bits_clear": // (hi & vhi) == 0 && (lo & vlo) == 0
		return []bpf.Instruction{
			hi, bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: vhi, SkipTrue: skipToEnd},
			lo, bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: vlo, SkipTrue: skipToEnd},
		}, nil
	}
	if op == "" && (a.Op == "eq32" || a.Op == "ne32") {
		return nil, fmt.Errorf("args: op %q: value %#x does not fit 32 bits", a.Op, a.Value)
	}
	return nil, fmt.Errorf("args: op %q: want eq, ne, eq32, ne32, bits_set or bits_clear", a.Op)
}

// errnos are the errors a rule may return.
var errnos = map[string]unix.Errno{
	"EPERM": unix.EPERM, "ENOSYS": unix.ENOSYS, "EACCES": unix.EACCES, "EINVAL": unix.EINVAL,
	"EOPNOTSUPP": unix.EOPNOTSUPP, "ENOENT": unix.ENOENT,
}

func action(r Rule) (uint32, error) {
	switch r.Action {
	case "", "errno":
		name := r.Errno
		if name == "" {
			name = "EPERM"
		}
		e, ok := errnos[name]
		if !ok {
			return 0, fmt.Errorf("errno: %q is not one of EPERM, ENOSYS, EACCES, EINVAL, EOPNOTSUPP, ENOENT", name)
		}
		return unix.SECCOMP_RET_ERRNO | uint32(e), nil
	case "kill_process":
		if r.Errno != "" {
			return 0, errors.New("errno: given with the kill_process action")
		}
		return unix.SECCOMP_RET_KILL_PROCESS, nil
	}
	return 0, fmt.Errorf("action: %q: want errno or kill_process", r.Action)
}
