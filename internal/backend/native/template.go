// This file implements templates: what a sandbox's root is made of. The host
// template is the host's /usr and a skeleton with a copy of part of its /etc
// (driver.go); a directory template is the operator's directory holding a
// whole Linux root, under a layer of mount points. A directory template's
// content is untrusted: the driver never writes into it nor follows a link
// of it on the host, and its root's mount targets are the driver's own
// directories whatever the template holds there.

package native

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/isolation/mount"
	"sbx.dev/sbx/internal/sandbox"
)

// dirTemplate is a directory template, its root held open since the driver
// opened: the directory every sandbox of it gets is the one the operator
// named then, whatever the path names later.
type dirTemplate struct {
	name string
	dir  string // the operator's path, for the log
	fd   int    // O_PATH of dir
}

// layer is a read-only lower layer of a sandbox's root: a host directory,
// idmapped into the sandbox's user namespace and attached at lowerDir(i).
type layer struct {
	path string
	// fd, when >= 0, is the directory itself (path only names it).
	fd int
}

// rootLayers is what one sandbox's root is made of.
type rootLayers struct {
	template string
	lowers   []layer
	// overlays are the names of the sandbox's own writable layers, the
	// root's ("root") first.
	overlays []string
	// writable are the top-level directories its processes may write
	// besides the common ones (Landlock; confine.go's writable).
	writable []string
	// dir is set for a directory template: the root overlay is its mount
	// points over it, and nothing else of the host is mounted.
	dir bool
}

// openTemplates opens each directory template's root and builds the mount
// points laid over them under layers. A root that cannot be opened as a
// directory refuses the driver (the daemon does not start), naming it.
func (d *Driver) openTemplates(dirs map[string]string, layers string) error {
	if len(dirs) == 0 {
		return nil
	}
	d.templates = map[string]*dirTemplate{}
	for _, name := range slices.Sorted(maps.Keys(dirs)) {
		dir := dirs[name]
		if name == sandbox.TemplateHost || !filepath.IsAbs(dir) {
			d.closeTemplates()
			return fmt.Errorf("%w: template %q: root %q: want another name than host and an absolute path", backend.ErrRefused, name, dir)
		}
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			d.closeTemplates()
			return fmt.Errorf("%w: template %q: opening its root %s: %w", backend.ErrRefused, name, dir, err)
		}
		d.templates[name] = &dirTemplate{name: name, dir: dir, fd: fd}
	}
	var err error
	if d.mountPoints, err = mount.BuildMountPoints(layers); err != nil {
		d.closeTemplates()
		return err
	}
	return nil
}

// closeTemplates closes the templates' roots.
func (d *Driver) closeTemplates() {
	for _, t := range d.templates {
		unix.Close(t.fd)
	}
	d.templates = nil
}

// templateNames are the templates this driver serves: host first, then the
// directory templates by name.
func (d *Driver) templateNames() []string {
	return append([]string{sandbox.TemplateHost}, slices.Sorted(maps.Keys(d.templates))...)
}

// rootOf returns what a sandbox of template name is made of. An unknown
// template, or a directory template the driver refuses (inspect), is
// ErrInvalid naming it; nothing is made before.
func (d *Driver) rootOf(name string) (*rootLayers, error) {
	if name == sandbox.TemplateHost {
		r := &rootLayers{template: name, overlays: d.overlayNames()}
		for _, l := range d.lowers {
			r.lowers = append(r.lowers, layer{path: l, fd: -1})
		}
		for _, dir := range d.skel.RealDirs {
			r.writable = append(r.writable, "/"+dir)
		}
		return r, nil
	}
	t, ok := d.templates[name]
	if !ok {
		return nil, fmt.Errorf("%w: template %q not found (known: %s)", sandbox.ErrInvalid, name, strings.Join(d.templateNames(), ", "))
	}
	writable, err := t.inspect()
	if err != nil {
		return nil, err
	}
	return &rootLayers{
		template: name,
		lowers:   []layer{{path: d.mountPoints, fd: -1}, {path: t.dir, fd: t.fd}},
		overlays: []string{"root"},
		writable: writable,
		dir:      true,
	}, nil
}

// inspect looks at the template's root, never following a link of it: a
// root whose /etc is not a directory (a link to a host path, say) is
// refused, since its sandboxes would get an /etc of the driver's three files
// and nothing of the template's. It returns the top-level directories of
// mount.TopLinks that are directories there, which its sandboxes may write
// (as the host template's own overlays of them); those that are links (into
// /usr, on a merged-/usr root) are not followed to a place of the template's
// choosing.
//
// This is a check of the template's shape, not the wall: the root's mount
// targets are the mount points' directories whatever the template holds,
// and the driver never writes into it.
func (t *dirTemplate) inspect() (writable []string, err error) {
	fd, err := t.openDir("etc")
	switch {
	case err == nil:
		unix.Close(fd)
	case errors.Is(err, unix.ENOENT): // the mount points give it one
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EXDEV):
		return nil, fmt.Errorf("%w: template %q: its /etc is a symlink or not a directory; a template's /etc must be a directory", sandbox.ErrInvalid, t.name)
	default:
		return nil, fmt.Errorf("template %q: opening its /etc: %w", t.name, err)
	}
	for _, name := range mount.TopLinks {
		fd, err := t.openDir(name)
		if err != nil {
			continue // absent, or a link: nothing of it is writable
		}
		unix.Close(fd)
		writable = append(writable, "/"+name)
	}
	return writable, nil
}

// openDir opens rel, a directory beneath the template's root, reached with
// no symlink and no way out of the root.
func (t *dirTemplate) openDir(rel string) (int, error) {
	return unix.Openat2(t.fd, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
}

// idmapped returns a detached idmapped copy of l in the user namespace
// usernsFD (mount.IDMapped).
func (l layer) idmapped(usernsFD int) (int, error) {
	if l.fd >= 0 {
		return mount.IDMappedAt(l.fd, "", l.path, usernsFD)
	}
	return mount.IDMapped(l.path, usernsFD)
}
