// Package wakesource is the wakeup source: it watches Wakeup records and
// delivers each when it is due (package wakeup's documentation says what it
// guarantees, and package wakeup gives it the names its users know). It
// reads and deletes records through Records, either client-go's dynamic
// client (Dynamic) or controller-runtime's (wakeup.NewSource), and links
// neither controller-runtime nor client-go's typed API: the opzero hub, an
// always-on process, runs it without them.
package wakesource
