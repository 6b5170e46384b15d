//go:build !sbxfault

package fault

import "time"

// Enabled reports whether this binary was built with the sbxfault tag.
const Enabled = false

// Point does nothing: this binary was built without the sbxfault tag.
func Point(name string) {}

// Missing reports no layer missing: this binary was built without the
// sbxfault tag.
func Missing(layer string) string { return "" }

// Fail never fails: this binary was built without the sbxfault tag.
func Fail(step string) error { return nil }

// Wall is time.Now: this binary was built without the sbxfault tag.
func Wall() time.Time { return time.Now() }
