// Package cgroup creates, limits, kills and removes cgroups over cgroup v1, v2 and
// hybrid hosts (v1 controllers plus a v2 hierarchy used for kill and freeze) behind
// one type. It knows nothing of sandboxes: a Group is a relative path it created
// in every hierarchy it needs, and it never touches a group it did not create.
package cgroup
