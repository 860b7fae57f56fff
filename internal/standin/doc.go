// Package standin is what one reconcile carries in its context, named for
// its main part, the object that stands in for a read; in both engines: the key and kind being reconciled, the event's object that stands
// in for the reconcile's first Get of its key (serverless, Resource mode;
// or the object a map function's List returned, Listed), the generation the reconciler read (which automatic observedGeneration
// writes back), and the Versions the reconciler's client reports its reads
// and writes to (serverless), so that a stand-in is never older than what
// this instance has read or written.
package standin
