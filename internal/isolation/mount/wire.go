package mount

import "sbx.dev/sbx/internal/wire"

// Encode appends p to w (package wire), for Decode.
func (p Plan) Encode(w *wire.Writer) {
	w.String(p.Root)
	p.RootLayer.encode(w)
	w.Uint(uint64(len(p.Overlays)))
	for _, o := range p.Overlays {
		o.encode(w)
	}
	w.Uint(uint64(len(p.Binds)))
	for _, b := range p.Binds {
		w.String(b.Source)
		w.String(b.Target)
		w.Bool(b.ReadOnly)
	}
	w.Strings(p.Attach)
	w.Int(p.TmpBytes)
	w.Int(p.ShmBytes)
}

// Decode reads what Encode wrote; r.Err says whether it could.
func Decode(r *wire.Reader) Plan {
	p := Plan{Root: r.String(), RootLayer: decodeOverlay(r)}
	if n := r.Count(4); n > 0 {
		p.Overlays = make([]Overlay, n)
		for i := range p.Overlays {
			p.Overlays[i] = decodeOverlay(r)
		}
	}
	if n := r.Count(3); n > 0 {
		p.Binds = make([]Bind, n)
		for i := range p.Binds {
			p.Binds[i] = Bind{Source: r.String(), Target: r.String(), ReadOnly: r.Bool()}
		}
	}
	p.Attach = r.Strings()
	p.TmpBytes = r.Int()
	p.ShmBytes = r.Int()
	return p
}

func (o Overlay) encode(w *wire.Writer) {
	w.String(o.Target)
	w.Strings(o.Lower)
	w.String(o.Upper)
	w.String(o.Work)
}

func decodeOverlay(r *wire.Reader) Overlay {
	return Overlay{Target: r.String(), Lower: r.Strings(), Upper: r.String(), Work: r.String()}
}
