package seccomp

import (
	"encoding/binary"
	"errors"
	"fmt"
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
	for i, r := range rules {
		block, err := compileRule(info, r)
		if err != nil {
			where := p.Name
			if i < len(floor.Rules) {
				where = "floor"
			}
			return nil, fmt.Errorf("seccomp profile %q: rule %d (%s): %w", p.Name, i+1, where, err)
		}
		ins = append(ins, block...)
	}
	ins = append(ins, bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW})
	raw, err := bpf.Assemble(ins)
	if err != nil {
		return nil, fmt.Errorf("seccomp profile %q: %w", p.Name, err)
	}
	if len(raw) > filter.MaxInstructions {
		return nil, fmt.Errorf("seccomp profile %q: %d instructions, the kernel takes 4096", p.Name, len(raw))
	}
	return filter.New(p.Name, raw), nil
}

// compileRule is one block per syscall of r: load the number, skip the block
// unless it is this syscall, check each argument condition (skipping the
// rest of the block when one fails), return the action. Each block loads the
// number afresh, so a condition that loaded an argument never misleads the
// next block.
func compileRule(info *arch.Info, r Rule) ([]bpf.Instruction, error) {
	if len(r.Names) == 0 {
		return nil, errors.New("names: empty")
	}
	ret, err := action(r)
	if err != nil {
		return nil, err
	}
	var cond []bpf.Instruction
	for _, a := range r.Args {
		c, err := condition(a)
		if err != nil {
			return nil, err
		}
		cond = append(cond, c...)
	}
	var out []bpf.Instruction
	for _, name := range r.Names {
		nr, ok := info.SyscallNames[name]
		if !ok {
			return nil, fmt.Errorf("names: unknown syscall %q on %s", name, info.Name)
		}
		body := append(slices.Clone(cond), bpf.RetConstant{Val: ret})
		// Jumps inside body are relative to the end of body: a failed
		// condition skips to just past the return.
		body = fixSkips(body)
		out = append(out,
			bpf.LoadAbsolute{Off: offNR, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(nr | info.SeccompMask), SkipFalse: uint8(len(body))},
		)
		out = append(out, body...)
	}
	return out, nil
}

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
