// Package mountns gives a local process files at the absolute paths a
// container mounts them at (/certs, /token, ...) without writing those
// paths on the host: the process is started through a helper (the
// running binary itself, re-executed) in a mount namespace of its own,
// whose root is a tmpfs in the caller's folder holding a bind mount of
// every top-level entry of the host's / and, at each mount path, a bind
// mount of a folder (or file) the caller wrote. The helper then chroots
// into it, changes to the working folder and execs the real command, so
// the process keeps the helper's PID (and its parent-death signal).
//
// # Guarantees
//
//   - Nothing is created or changed on the host outside the caller's
//     root folder: a mount path whose top-level folder does not exist on
//     the host is made inside the tmpfs; one that exists on the host is
//     mounted over, in the namespace only. Mounts are made private first,
//     so none propagates back.
//   - A binary that may be re-executed calls Main first thing in main
//     (and in TestMain); Main returns at once unless the process is such
//     a helper.
//   - Available says why a namespace cannot be had here (not Linux, not
//     root); the caller then starts the process as before and warns.
//
// # Caveats
//
// A mount path whose missing folder would sit under an existing host
// folder other than / (/etc/app/certs when /etc/app does not exist) is
// refused by Check: making it would write on the host, and a tmpfs over
// /etc would hide the host's files. Unprivileged user namespaces are not
// used: without root no namespace is made.
package mountns
