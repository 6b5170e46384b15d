// Package arch holds tests of the codebase's shape: the dependency fences between
// layers and the one-package-comment rule. It has no code of its own.
package arch
