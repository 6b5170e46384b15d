package nsinit

import (
	"testing"

	"sbx.dev/sbx/internal/testutil/wiretest"
)

func TestPlanWire(t *testing.T) {
	wiretest.RoundTrip(t, Plan.MarshalBinary, func(b []byte) (p Plan, err error) {
		err = p.UnmarshalBinary(b)
		return p, err
	})
}
