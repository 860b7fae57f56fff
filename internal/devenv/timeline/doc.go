// Package timeline draws an `opzero dev` session as an SVG picture, from
// the session's event stream (opzero dev --events=json, package dev's
// Event): for each Knative Service, the instances over time as a step
// line, each cold start and each scale to zero marked on it, the
// deliveries in one row per wake reason (create, update, delete, sweep,
// wakeup, external; a failed answer drawn red), and the reconciles the
// answers reported (green) and the failed ones (red).
//
// # Guarantees
//
//   - The picture is a function of the events alone: the same stream
//     gives the same bytes (tests compare structure, docs keep the file).
//   - Every mark carries a <title> (the delivery's `opzero dev -v` line,
//     the process's pid), which a browser shows on hover.
//   - Each series is a <g> with a class naming it (instances, cold-starts,
//     scale-to-zero, deliveries, reconciled, reconcile-failed) and
//     data-service naming the Service, so tools and tests can read the
//     picture back as XML.
//
// # Caveats
//
//   - Time runs from the session's first event to its last; a stream cut
//     short (a session that crashed) is drawn up to where it ends.
//   - Instances are counted from process-started and process-stopped
//     events: a stream that starts in the middle of a session (events
//     written by an older opzero dev, or a file appended to) starts from 0.
package timeline
