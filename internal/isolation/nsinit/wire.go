package nsinit

import (
	"fmt"

	"sbx.dev/sbx/internal/isolation/mount"
	"sbx.dev/sbx/internal/wire"
)

// planTag starts an encoded Plan.
const planTag = "sbx.plan/1"

// MarshalBinary encodes p for UnmarshalBinary (package wire): the form the
// parent writes on PlanFD.
func (p Plan) MarshalBinary() ([]byte, error) {
	w := wire.Record(planTag)
	w.String(p.Hostname)
	p.Mount.Encode(w)
	w.String(p.Workdir)
	w.Int(int64(p.MountsFD))
	w.Ints(p.CloseFDs)
	w.Int(int64(p.UserNamespaces))
	w.Uint(uint64(len(p.OpenFDs)))
	for _, o := range p.OpenFDs {
		w.String(o.Path)
		w.Int(int64(o.Flags))
		w.Int(int64(o.FD))
	}
	w.Ints(p.KeepFDs)
	w.Uint(p.NoFile)
	w.Uint(p.NProc)
	w.Bool(p.BoundingPerThread)
	w.Strings(p.Caps)
	w.String(p.Path)
	w.Strings(p.Argv)
	w.Strings(p.Env)
	w.Bytes(p.Agent)
	return w.B, nil
}

// UnmarshalBinary decodes what MarshalBinary made. (The calls in a composite
// literal run in lexical order, the fields' order on the wire.)
func (p *Plan) UnmarshalBinary(b []byte) error {
	r, err := wire.Open(b, planTag)
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	*p = Plan{Hostname: r.String(), Mount: mount.Decode(r), Workdir: r.String(), MountsFD: int(r.Int()),
		CloseFDs: r.Ints(), UserNamespaces: int(r.Int())}
	if n := r.Count(3); n > 0 {
		p.OpenFDs = make([]OpenFD, n)
		for i := range p.OpenFDs {
			p.OpenFDs[i] = OpenFD{Path: r.String(), Flags: int(r.Int()), FD: int(r.Int())}
		}
	}
	p.KeepFDs = r.Ints()
	p.NoFile, p.NProc, p.BoundingPerThread = r.Uint(), r.Uint(), r.Bool()
	p.Caps, p.Path, p.Argv, p.Env, p.Agent = r.Strings(), r.String(), r.Strings(), r.Strings(), r.Bytes()
	if err := r.Err(); err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	return nil
}
