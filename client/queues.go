package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/apicall"
)

// defaultQueuePage is the page of QueuePage when QueueListParams.Limit is
// 0, as the coordinator's: the daemon is always sent a limit, since
// GET /v1/queues without limit or after answers every queue.
const defaultQueuePage = 100

// queuePage asks the daemon for one page of queues (GET /v1/queues with
// limit and after).
func (b *httpBackend) queuePage(ctx context.Context, p QueueListParams) (QueuePage, error) {
	limit := p.Limit
	if limit == 0 {
		limit = defaultQueuePage
	}
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	if p.After != "" {
		q.Set("after", p.After)
	}
	var page QueuePage
	if err := b.call(ctx, http.MethodGet, "/v1/queues", q, nil, &page, b.timeout); err != nil {
		if olderThanQueuePages(err) {
			// Not a fallback to every queue at once: the caller asked
			// for a bounded answer, as queues list --limit does, which
			// says the same.
			return QueuePage{}, fmt.Errorf("leasehold daemon at %s is older than paged queue lists (2026-12-06): upgrade it, or call Queues for every queue at once: %w", b.server, errors.ErrUnsupported)
		}
		return QueuePage{}, err
	}
	page.Queues = emptyNotNil(page.Queues)
	return page, nil
}

// olderThanQueuePages reports whether err is the refusal of a page of
// queues by a daemon from before paging: its 400 names the first unknown
// query parameter in name order ("after" when both are sent), as
// queues list reads it.
func olderThanQueuePages(err error) bool {
	if !errors.Is(err, coordinator.ErrInvalid) {
		return false
	}
	return apicall.RefusesParams(err.Error(), "limit", "after")
}
