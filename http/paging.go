package httpapi

import (
	"net/url"
	"strconv"
	"time"

	"phonefleet/domain"
)

// The one paging rule of every list on the control surface
// (docs/decisions.md, "Paging"):
//
//   - limit is a whole number of at least 1; absent, the list's default
//     (50); above the list's maximum it is clamped to it (spec 4.3's rule
//     for receipts, applied to every list); anything else is refused as
//     invalid_argument with field "limit";
//   - a cursor is a value the list returned, passed back unchanged;
//     anything else is refused as invalid_argument naming its field,
//     never answered with an empty page.

// defaultPageLimit is every list's page size when limit is absent.
const defaultPageLimit = 50

// pageLimit reads ?limit= under the rule above, for a list whose pages
// hold at most max items.
func pageLimit(q url.Values, max int) (int, error) {
	if !q.Has("limit") {
		return defaultPageLimit, nil
	}
	n, err := strconv.Atoi(q.Get("limit"))
	if err != nil || n < 1 {
		return 0, domain.Errorf(domain.CodeInvalidArgument,
			"limit must be a whole number of at least 1 (values above %d are taken as %d)", max, max).With("field", "limit")
	}
	return min(n, max), nil
}

// badCursor is the one refusal of a cursor the list did not return.
func badCursor(field, returnedAs string) error {
	return domain.Errorf(domain.CodeInvalidArgument,
		"%s must be a value this list returned as %s, passed back unchanged", field, returnedAs).With("field", field)
}

// idCursor reads a cursor that is the id (of the given prefix) of the
// last item of the previous page; "" when absent.
func idCursor(q url.Values, field, returnedAs, prefix string) (string, error) {
	raw := q.Get(field)
	if raw != "" && !domain.HasPrefix(raw, prefix) {
		return "", badCursor(field, returnedAs)
	}
	return raw, nil
}

// timeCursor reads a cursor that is a date-time the list returned; the
// zero time when absent.
func timeCursor(q url.Values, field, returnedAs string) (time.Time, error) {
	raw := q.Get(field)
	if raw == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, raw)
	if err != nil {
		return time.Time{}, badCursor(field, returnedAs)
	}
	return t, nil
}
