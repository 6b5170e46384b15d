package native

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sbx.dev/sbx/internal/sandbox"
)

func TestParseIDRange(t *testing.T) {
	for _, in := range []string{"", "auto"} {
		if got, err := ParseIDRange(in); err != nil || got != (IDRange{}) {
			t.Errorf("ParseIDRange(%q) = %v, %v; want the automatic range", in, got, err)
		}
	}
	got, err := ParseIDRange("196608-458751")
	if err != nil || got != (IDRange{Start: 196608, Count: 4 * UIDSlot}) {
		t.Errorf("ParseIDRange(196608-458751) = %v, %v", got, err)
	}
	for _, bad := range []string{"x", "100-", "0-65535", "1000-70000", "65536-70000", "65536-4294967295", "131072-65536"} {
		if _, err := ParseIDRange(bad); err == nil || !strings.Contains(err.Error(), "uid_range") {
			t.Errorf("ParseIDRange(%q) = %v, want an error naming uid_range", bad, err)
		}
	}
}

func TestUIDsAllocRelease(t *testing.T) {
	u := newUIDs(IDRange{Start: 3 * UIDSlot, Count: 2 * UIDSlot})
	a, b := sandbox.NewID(), sandbox.NewID()
	ua, err := u.alloc(a)
	if err != nil {
		t.Fatal(err)
	}
	ub, err := u.alloc(b)
	if err != nil {
		t.Fatal(err)
	}
	if ua == ub || ua%UIDSlot != 0 || ub%UIDSlot != 0 || ua < 3*UIDSlot || ub >= 5*UIDSlot {
		t.Fatalf("alloc gave %d and %d", ua, ub)
	}
	if _, err := u.alloc(sandbox.NewID()); !errors.Is(err, sandbox.ErrLimit) {
		t.Errorf("alloc of a full range = %v, want ErrLimit", err)
	}
	if err := u.claim(ua, b); err == nil {
		t.Errorf("claim of a's slot for b succeeded")
	}
	u.release(a)
	c := sandbox.NewID()
	uc, err := u.alloc(c)
	if err != nil || uc != ua {
		t.Errorf("alloc after release = %d, %v; want %d", uc, err, ua)
	}
	if got, ok := u.held(b); !ok || got != ub {
		t.Errorf("held(b) = %d, %v", got, ok)
	}
}

func TestRegisterRange(t *testing.T) {
	old := uidRegistry
	uidRegistry = t.TempDir()
	t.Cleanup(func() { uidRegistry = old })
	dirA, dirB := t.TempDir(), t.TempDir()

	a, err := registerRange("insta", dirA, IDRange{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Count != autoSlots*UIDSlot || a.Start < autoStart {
		t.Fatalf("auto range = %v", a)
	}
	again, err := registerRange("insta", dirA, IDRange{})
	if err != nil || again != a {
		t.Errorf("a restart's auto range = %v, %v; want the same %v", again, err, a)
	}
	b, err := registerRange("instb", dirB, IDRange{})
	if err != nil {
		t.Fatal(err)
	}
	if b.overlaps(a) {
		t.Errorf("auto ranges %v and %v overlap", a, b)
	}
	// An explicit range over a live instance's is refused, naming it.
	_, err = registerRange("instc", t.TempDir(), IDRange{Start: a.Start, Count: UIDSlot})
	if err == nil || !strings.Contains(err.Error(), `"insta"`) || !strings.Contains(err.Error(), dirA) {
		t.Errorf("overlapping range = %v, want an error naming instance insta and its data dir", err)
	}
	// Once that instance's data dir is gone, its range is free again.
	if err := os.RemoveAll(dirA); err != nil {
		t.Fatal(err)
	}
	if _, err := registerRange("instc", t.TempDir(), IDRange{Start: a.Start, Count: UIDSlot}); err != nil {
		t.Errorf("range of a gone instance = %v, want free", err)
	}
	if _, err := os.Stat(filepath.Join(uidRegistry, "insta")); err == nil {
		t.Errorf("the gone instance's entry was kept")
	}
	// A range over a host user's id is refused, naming the user.
	_, err = registerRange("instd", t.TempDir(), IDRange{Start: 0, Count: UIDSlot})
	if err == nil || !strings.Contains(err.Error(), `"root"`) {
		t.Errorf("range over uid 0 = %v, want an error naming the host user root", err)
	}
}
