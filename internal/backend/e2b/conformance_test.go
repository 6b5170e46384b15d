package e2b

import (
	"context"
	"sync"
	"testing"

	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/backend/backendtest"
)

// TestConformance runs the backend suite with the driver against a second
// sbx on loopback. The suite's host audit is about the host resources of the
// driver under test, which holds none; instead each case ends by checking
// that the remote runs no sandbox of the driver's instance.
func TestConformance(t *testing.T) {
	rd := startRemote(t)
	instance := instanceName()
	opts := rd.options(t, instance)
	var checked sync.Map
	backendtest.Run(t, func(t *testing.T) backend.Driver {
		if _, again := checked.LoadOrStore(t.Name(), true); !again {
			// The first cleanup a case registers runs last: after its
			// sandboxes were destroyed.
			t.Cleanup(func() { rd.checkNone(t, instance) })
		}
		d := open(opts)
		t.Cleanup(func() { d.Close(context.Background()) })
		return d
	})
}
