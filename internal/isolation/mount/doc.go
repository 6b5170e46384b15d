// Package mount assembles a sandbox's root filesystem inside a new mount
// namespace: an overlay root over a skeleton, overlays of host directories with
// per-sandbox upper layers, binds, a minimal /dev, a fresh /proc with masks, then
// pivot_root. It also builds, once per driver, the read-only layers those overlays
// use (the skeleton and the /etc mask). Failures are *Error values.
package mount
