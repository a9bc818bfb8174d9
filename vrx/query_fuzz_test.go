package vrx

import (
	"errors"
	"net/http/httptest"
	"net/url"
	"testing"

	"phonefleet/domain"
)

// FuzzPictureQuery reads arbitrary maxWidth and quality parameters of a
// frame picture: each is absent (0) or within its range, or the request
// is refused with invalid_argument.
func FuzzPictureQuery(f *testing.F) {
	for _, s := range [][2]string{{"", ""}, {"640", "80"}, {"0", "101"}, {"4097", "-1"}, {"+5", " 5"}, {"99999999999999999999", "1e2"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, maxWidth, quality string) {
		r := httptest.NewRequest("GET", "/frames/x/picture?"+url.Values{"maxWidth": {maxWidth}, "quality": {quality}}.Encode(), nil)
		w, q, err := pictureQuery(r)
		if err != nil {
			var de *domain.Error
			if !errors.As(err, &de) || de.Code != domain.CodeInvalidArgument {
				t.Fatalf("maxWidth=%q quality=%q: got %v; want invalid_argument", maxWidth, quality, err)
			}
			return
		}
		if w < 0 || w > maxPictureWidth || q < 0 || q > 100 || (maxWidth == "") != (w == 0) || (quality == "") != (q == 0) {
			t.Fatalf("maxWidth=%q quality=%q read as %d, %d", maxWidth, quality, w, q)
		}
	})
}
