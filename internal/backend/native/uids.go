// This file implements the host uid/gid ranges of the sandboxes' user
// namespaces: one range for the driver's instance, recorded host-wide so two
// instances never share an id, and one slot of it per sandbox.

package native

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/sandbox"
)

// UIDSlot is how many ids each sandbox gets: root (0) to nobody (65534) and
// every other 16-bit id programs expect, mapped to a host range of its own.
const UIDSlot = 65536

// Automatic ranges: blocks of autoSlots sandboxes, from autoStart, below the
// ids the kernel reserves ((uid_t)-1 and the overflow ids are far below 2^32).
const (
	autoSlots = 1024
	autoStart = 2 << 26
	uidLimit  = 1<<32 - UIDSlot
)

// uidRegistry is the host-wide record of every instance's range. It lives in
// /run: ranges matter only while sandboxes run, and none survives a reboot.
var uidRegistry = "/run/sbx/uid-ranges"

// IDRange is a span of host ids: [Start, Start+Count).
type IDRange struct {
	Start, Count uint64
}

func (r IDRange) end() uint64 { return r.Start + r.Count }

func (r IDRange) overlaps(o IDRange) bool { return r.Start < o.end() && o.Start < r.end() }

func (r IDRange) String() string { return fmt.Sprintf("%d-%d", r.Start, r.end()-1) }

// ParseIDRange parses "auto" (the zero IDRange) or "START-END", both
// inclusive: at least one sandbox's worth of ids, starting at a multiple of
// 65536 so a sandbox's ids read the same in hex on the host.
func ParseIDRange(s string) (IDRange, error) {
	if s == "" || s == "auto" {
		return IDRange{}, nil
	}
	a, b, ok := strings.Cut(s, "-")
	start, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 32)
	last, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 32)
	switch {
	case !ok || err1 != nil || err2 != nil:
		return IDRange{}, fmt.Errorf("uid_range %q: want \"auto\" or START-END (host uids, inclusive)", s)
	case start == 0 || start%UIDSlot != 0:
		return IDRange{}, fmt.Errorf("uid_range %q: the start must be a non-zero multiple of %d", s, UIDSlot)
	case last < start+UIDSlot-1:
		return IDRange{}, fmt.Errorf("uid_range %q: fewer than the %d ids of one sandbox", s, UIDSlot)
	case last >= uidLimit:
		return IDRange{}, fmt.Errorf("uid_range %q: the end must be below %d", s, uint64(uidLimit))
	}
	n := (last - start + 1) / UIDSlot * UIDSlot
	return IDRange{Start: start, Count: n}, nil
}

// uids hands out one slot of the instance's range per sandbox. A slot is
// taken by the sandbox's id and given back only when its teardown is done, so
// two live sandboxes never share a host id, and a sandbox whose teardown failed
// keeps its slot.
type uids struct {
	r  IDRange
	mu sync.Mutex
	// owner maps a slot's first host id to the sandbox holding it; slots outside
	// r (a range changed across a restart) are held too, never handed out.
	owner map[uint64]sandbox.ID
	next  uint64
}

func newUIDs(r IDRange) *uids { return &uids{r: r, owner: map[uint64]sandbox.ID{}} }

// alloc takes a free slot for id and returns its first host id.
func (u *uids) alloc(id sandbox.ID) (uint64, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	slots := u.r.Count / UIDSlot
	for i := uint64(0); i < slots; i++ {
		base := u.r.Start + (u.next+i)%slots*UIDSlot
		if _, taken := u.owner[base]; !taken {
			u.owner[base] = id
			u.next = (u.next + i + 1) % slots
			return base, nil
		}
	}
	return 0, fmt.Errorf("%w: every one of the %d uid ranges of %s (uid_range) is held by a sandbox", sandbox.ErrLimit, slots, u.r)
}

// claim records that id holds the slot at base (a sandbox found at start or
// recovered). It fails when another sandbox holds it.
func (u *uids) claim(base uint64, id sandbox.ID) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if held, ok := u.owner[base]; ok && held != id {
		return fmt.Errorf("host uids %d-%d: held by sandbox %s", base, base+UIDSlot-1, held)
	}
	u.owner[base] = id
	return nil
}

// release gives back the slot id holds, if any.
func (u *uids) release(id sandbox.ID) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for base, held := range u.owner {
		if held == id {
			delete(u.owner, base)
		}
	}
}

// held returns the first host id of id's slot.
func (u *uids) held(id sandbox.ID) (uint64, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for base, held := range u.owner {
		if held == id {
			return base, true
		}
	}
	return 0, false
}

// count is the number of slots held.
func (u *uids) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.owner)
}

// registerRange settles this instance's range host-wide: want, or with the
// zero IDRange the range this instance had (a restart) or the first free
// block. It refuses a range that overlaps a host user's or group's id, a
// subordinate range in /etc/subuid or /etc/subgid, or another live instance's
// range, saying which. An instance is live while its data directory exists.
func registerRange(instance, dataDir string, want IDRange) (IDRange, error) {
	if err := os.MkdirAll(uidRegistry, 0o755); err != nil {
		return IDRange{}, fmt.Errorf("uid ranges: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(uidRegistry, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return IDRange{}, fmt.Errorf("uid ranges: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return IDRange{}, fmt.Errorf("uid ranges: locking %s: %w", lock.Name(), err)
	}
	others, mine, err := readRegistry(instance, true)
	if err != nil {
		return IDRange{}, err
	}
	host, err := hostIDs()
	if err != nil {
		return IDRange{}, err
	}
	conflict := func(r IDRange) error {
		for _, o := range others {
			if r.overlaps(o.r) {
				return fmt.Errorf("uid_range %s overlaps the range %s of sbx instance %q (data dir %s): give each instance its own", r, o.r, o.instance, o.dataDir)
			}
		}
		for _, h := range host {
			if r.overlaps(h.r) {
				return fmt.Errorf("uid_range %s overlaps %s: sandboxes must never share an id with a host user", r, h.what)
			}
		}
		return nil
	}
	r := want
	switch {
	case want.Count > 0:
		if err := conflict(want); err != nil {
			return IDRange{}, err
		}
	case mine.Count > 0 && conflict(mine) == nil:
		r = mine
	default:
		r = IDRange{}
		for start := uint64(autoStart); start+autoSlots*UIDSlot <= uidLimit; start += autoSlots * UIDSlot {
			if c := (IDRange{Start: start, Count: autoSlots * UIDSlot}); conflict(c) == nil {
				r = c
				break
			}
		}
		if r.Count == 0 {
			return IDRange{}, errors.New("uid_range auto: no free block of host ids is left; set uid_range")
		}
	}
	entry := fmt.Sprintf("%d %d\n%s\n", r.Start, r.Count, dataDir)
	tmp := filepath.Join(uidRegistry, "."+instance)
	if err := os.WriteFile(tmp, []byte(entry), 0o644); err != nil {
		return IDRange{}, fmt.Errorf("uid ranges: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(uidRegistry, instance)); err != nil {
		return IDRange{}, fmt.Errorf("uid ranges: %w", err)
	}
	return r, nil
}

type registered struct {
	instance, dataDir string
	r                 IDRange
}

// readRegistry returns the live entries of other instances and this
// instance's own range; with prune it removes the entries of instances whose
// data directory is gone.
func readRegistry(instance string, prune bool) (others []registered, mine IDRange, err error) {
	ents, err := os.ReadDir(uidRegistry)
	if err != nil {
		return nil, IDRange{}, fmt.Errorf("uid ranges: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(uidRegistry, name)
		reg, ok := readRecord(name)
		if !ok {
			continue
		}
		if name == instance {
			mine = reg.r
			continue
		}
		if gone(reg, false) {
			if prune {
				os.Remove(path) // its sandboxes went with their directories
			}
			continue
		}
		others = append(others, reg)
	}
	return others, mine, nil
}

// readRecord reads the uid range record of instance name; false when there is
// none or it does not parse.
func readRecord(name string) (registered, bool) {
	b, err := os.ReadFile(filepath.Join(uidRegistry, name))
	if err != nil {
		return registered{}, false
	}
	var reg registered
	lines := strings.SplitN(string(b), "\n", 3)
	if len(lines) < 2 {
		return registered{}, false
	}
	if _, err := fmt.Sscanf(lines[0], "%d %d", &reg.r.Start, &reg.r.Count); err != nil || reg.r.Count == 0 {
		return registered{}, false
	}
	reg.instance, reg.dataDir = name, lines[1]
	return reg, true
}

// gone reports whether reg's data dir is gone: missing, or made again since
// for another instance (the driver names its instance in its dir at open).
// With strict, a dir that does not name an instance is gone too: emptied, or
// made by a daemon that never opened (gc's view; a range check keeps such a
// record, since an older daemon names none).
func gone(reg registered, strict bool) bool {
	if _, err := os.Stat(reg.dataDir); errors.Is(err, fs.ErrNotExist) {
		return true
	}
	b, err := os.ReadFile(filepath.Join(reg.dataDir, instanceFile))
	if errors.Is(err, fs.ErrNotExist) {
		return strict
	}
	return err == nil && strings.TrimSpace(string(b)) != reg.instance
}

// instanceFile, in the driver's data dir, names the instance that owns it.
const instanceFile = "instance"

type hostID struct {
	what string
	r    IDRange
}

// hostIDs lists the ids of the host's users and groups and its subordinate
// ranges.
func hostIDs() ([]hostID, error) {
	var out []hostID
	for _, f := range []struct{ path, kind string }{{"/etc/passwd", "user"}, {"/etc/group", "group"}} {
		err := scanLines(f.path, func(line string) {
			fields := strings.Split(line, ":")
			if len(fields) < 3 {
				return
			}
			id, err := strconv.ParseUint(fields[2], 10, 32)
			if err != nil {
				return
			}
			out = append(out, hostID{what: fmt.Sprintf("host %s %q (id %d in %s)", f.kind, fields[0], id, f.path), r: IDRange{Start: id, Count: 1}})
		})
		if err != nil {
			return nil, err
		}
	}
	for _, path := range []string{"/etc/subuid", "/etc/subgid"} {
		err := scanLines(path, func(line string) {
			fields := strings.Split(line, ":")
			if len(fields) != 3 {
				return
			}
			start, err1 := strconv.ParseUint(fields[1], 10, 32)
			n, err2 := strconv.ParseUint(fields[2], 10, 32)
			if err1 != nil || err2 != nil || n == 0 {
				return
			}
			out = append(out, hostID{what: fmt.Sprintf("the subordinate ids %d-%d of %q in %s", start, start+n-1, fields[0], path), r: IDRange{Start: start, Count: n}})
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func scanLines(path string, fn func(string)) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading host ids: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			fn(line)
		}
	}
	return sc.Err()
}
