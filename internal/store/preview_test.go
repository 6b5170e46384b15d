package store

import (
	"errors"
	"reflect"
	"testing"

	"sbx.dev/sbx/internal/sandbox"
)

func TestPublicPorts(t *testing.T) {
	s, path := openTemp(t)
	ctx := t.Context()
	a, b := record(sandbox.StateRunning), record(sandbox.StateRunning)
	for _, sb := range []sandbox.Sandbox{a, b} {
		if err := s.PutSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		id     sandbox.ID
		port   int
		public bool
	}{{a.ID, 8000, true}, {a.ID, 3000, true}, {a.ID, 8000, true}, {b.ID, 5000, true}, {b.ID, 5000, false}, {b.ID, 6000, false}} {
		if err := s.SetPortPublic(ctx, c.id, c.port, c.public); err != nil {
			t.Fatalf("SetPortPublic(%s, %d, %v) = %v", c.id, c.port, c.public, err)
		}
	}
	got, err := s.PublicPorts(ctx)
	if want := map[sandbox.ID][]int{a.ID: {3000, 8000}}; err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("PublicPorts() = %v, %v; want %v", got, err, want)
	}
	if got, err := s.PublicPorts(ctx, b.ID); err != nil || len(got) != 0 {
		t.Errorf("PublicPorts(b) = %v, %v; want none", got, err)
	}
	for _, c := range []struct {
		id   sandbox.ID
		port int
		want bool
	}{{a.ID, 8000, true}, {a.ID, 8001, false}, {b.ID, 5000, false}, {sandbox.NewID(), 8000, false}} {
		if got, err := s.PortPublic(ctx, c.id, c.port); err != nil || got != c.want {
			t.Errorf("PortPublic(%s, %d) = %v, %v; want %v", c.id, c.port, got, err, c.want)
		}
	}
	for _, public := range []bool{true, false} {
		if err := s.SetPortPublic(ctx, sandbox.NewID(), 8000, public); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("SetPortPublic(unknown sandbox, public=%v) = %v, want not found", public, err)
		}
	}
	if err := s.SetPortPublic(ctx, a.ID, 70000, true); err == nil {
		t.Errorf("SetPortPublic(port 70000) succeeded")
	}

	// They outlive a reopen, and go with their sandbox.
	s.Close()
	s2, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if ok, err := s2.PortPublic(ctx, a.ID, 3000); err != nil || !ok {
		t.Errorf("PortPublic after reopen = %v, %v", ok, err)
	}
	if err := s2.DeleteSandbox(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := s2.PublicPorts(ctx); err != nil || len(got) != 0 {
		t.Errorf("PublicPorts after the sandbox's delete = %v, %v; want none", got, err)
	}
}
