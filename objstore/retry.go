package objstore

import (
	"context"
	"fmt"
	"time"
)

// Retry policy: Attempts tries, sleeping FirstBackoff between the first
// two and doubling, and no attempt started once RetryBudget has passed,
// so a read against a dead server fails in seconds with a clear error
// rather than hanging a FUSE request. (One attempt may still take up to
// the dial and response-header timeouts of newClient, 3 s and 10 s.)
const (
	Attempts     = 4
	FirstBackoff = 100 * time.Millisecond
	RetryBudget  = 5 * time.Second
)

// retry runs op until it succeeds, fails permanently, runs out of
// attempts or budget, or ctx ends. what names the request in the error,
// e.g. "GET s3://b/k bytes=0-99". Every attempt counts as a request.
func (b *Bucket) retry(ctx context.Context, what string, op func(ctx context.Context) error) error {
	start := time.Now()
	backoff := FirstBackoff
	var err error
	for attempt := 1; ; attempt++ {
		b.stats.requests.Add(1)
		if err = op(ctx); err == nil {
			return nil
		}
		if permanent(err) || ctx.Err() != nil {
			b.stats.errors.Add(1)
			return err
		}
		if attempt == Attempts || time.Since(start)+backoff > RetryBudget {
			b.stats.errors.Add(1)
			return fmt.Errorf("%s: giving up after %d attempts in %v: %w",
				what, attempt, time.Since(start).Round(time.Millisecond), err)
		}
		b.log.Debug("objstore: retrying", "request", what, "attempt", attempt, "err", err)
		b.stats.retries.Add(1)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			b.stats.errors.Add(1)
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-t.C:
		}
		backoff *= 2
	}
}
