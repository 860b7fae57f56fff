package dev

import (
	"context"

	"github.com/opzero/opzero/internal/devenv/prune"
)

// prune deletes what an earlier session left of another wiring of the
// same operators (prune.Earlier, of what dev's field manager applied).
func (p *Platform) prune(ctx context.Context) ([]string, error) {
	return prune.Earlier(ctx, p.apply.dyn, p.apply.mapper, p.opts.Objects, FieldManager)
}
