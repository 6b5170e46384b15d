//go:build !sbxfault

package fault

// Enabled reports whether this binary was built with the sbxfault tag.
const Enabled = false

// Point does nothing: this binary was built without the sbxfault tag.
func Point(name string) {}
