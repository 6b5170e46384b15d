package mount

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Error records a failed mount-family operation with its arguments.
type Error struct {
	Op     string // "mount", "bind", "remount", "mknod", "mkdir", "symlink", "pivot_root", "umount", ...
	Source string
	Target string
	Fstype string
	Flags  uintptr
	Data   string
	Err    error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Op)
	if e.Source != "" {
		fmt.Fprintf(&b, " %s", e.Source)
	}
	if e.Target != "" {
		if e.Source != "" {
			b.WriteString(" on")
		}
		fmt.Fprintf(&b, " %s", e.Target)
	}
	if e.Fstype != "" {
		fmt.Fprintf(&b, " type %s", e.Fstype)
	}
	if e.Flags != 0 {
		fmt.Fprintf(&b, " flags %#x", e.Flags)
	}
	if e.Data != "" {
		fmt.Fprintf(&b, " (%s)", e.Data)
	}
	return b.String() + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// mount is unix.Mount returning an *Error named op.
func mount(op, source, target, fstype string, flags uintptr, data string) error {
	if err := unix.Mount(source, target, fstype, flags, data); err != nil {
		return &Error{Op: op, Source: source, Target: target, Fstype: fstype, Flags: flags, Data: data, Err: err}
	}
	return nil
}

// bind bind-mounts source on target, then remounts it with flags (MS_RDONLY,
// MS_NOSUID, ...) when any are given: a bind ignores them on the first call.
func bind(source, target string, flags uintptr) error {
	if err := mount("bind", source, target, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	if flags == 0 {
		return nil
	}
	return mount("remount", "", target, "", unix.MS_BIND|unix.MS_REMOUNT|flags, "")
}
