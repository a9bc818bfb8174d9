package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
)

// markedPictureDigests are the SHA-256 of set-of-marks pictures of the
// tour's screens as the encoder and the mark drawing wrote them before
// either was made faster for issue 28 item 5 (commit 7758849): a faster
// path must write the same bytes. Change them only with a change meant
// to alter the pictures.
var markedPictureDigests = map[string]string{
	"Compact_browser/jpeg768":                 "ad69e2943428bafa",
	"Compact_browser/marks-full-q90":          "084070aae2b6eec5",
	"Compact_browser/marks768":                "a907d7bc35f23163",
	"Compact_home/jpeg768":                    "d5fe8cf71034d321",
	"Compact_home/marks-full-q90":             "0e252f3ac986524c",
	"Compact_home/marks768":                   "54710fc282cce064",
	"Compact_notes/jpeg768":                   "4868bd65782f2199",
	"Compact_notes/marks-full-q90":            "0b211998864315d2",
	"Compact_notes/marks768":                  "5409d1c48fcf50b6",
	"Compact_settings/jpeg768":                "b18fb93ee9e9ca85",
	"Compact_settings/marks-full-q90":         "b58cc79476d19afd",
	"Compact_settings/marks768":               "4643ad1b706cc0b4",
	"Generic_browser/jpeg768":                 "f9bcf34fc7244395",
	"Generic_browser/marks-full-q90":          "66e5b4a543a3751f",
	"Generic_browser/marks768":                "2a8a220a8a4e0d50",
	"Generic_home/jpeg768":                    "4007f99238a4c852",
	"Generic_home/marks-full-q90":             "5147dda303f38753",
	"Generic_home/marks768":                   "c0688f8ff1c04c35",
	"Generic_notes/jpeg768":                   "9283dd14ac4aa77c",
	"Generic_notes/marks-full-q90":            "a17849b4b59b7a9f",
	"Generic_notes/marks768":                  "3142914ff74c0c9a",
	"Generic_settings/jpeg768":                "9d2dca10d483f214",
	"Generic_settings/marks-full-q90":         "58317fa79492dbb7",
	"Generic_settings/marks768":               "6cf0564cf475431d",
	"browser_editing_empty/jpeg768":           "46e15a43b82928ce",
	"browser_editing_empty/marks-full-q90":    "20782f38bf089af0",
	"browser_editing_empty/marks768":          "16e16f127249510a",
	"browser_editing_selected/jpeg768":        "5df2f903494473b9",
	"browser_editing_selected/marks-full-q90": "f6b3a2a5245e1f18",
	"browser_editing_selected/marks768":       "f4dbc78a86addd78",
	"browser_install_toast/jpeg768":           "92cd067afceabf3f",
	"browser_install_toast/marks-full-q90":    "440cdcb112221a00",
	"browser_install_toast/marks768":          "7adf4de28f291db7",
	"browser_page/jpeg768":                    "ec649d9d27a2df29",
	"browser_page/marks-full-q90":             "213aa75909a1d009",
	"browser_page/marks768":                   "f5be8d6be34cbdc3",
	"browser_scrolled/jpeg768":                "0f306dc5e41d8add",
	"browser_scrolled/marks-full-q90":         "0f07a67a5bdf5d37",
	"browser_scrolled/marks768":               "46538178374b237a",
	"browser_search/jpeg768":                  "8077ca580d58e548",
	"browser_search/marks-full-q90":           "d064f210dc1f8210",
	"browser_search/marks768":                 "6a0e2be4fa0415bf",
	"browser_start/jpeg768":                   "d9988a39ad752480",
	"browser_start/marks-full-q90":            "053a3fd792c900c5",
	"browser_start/marks768":                  "56a5970948f1cc59",
	"calculator/jpeg768":                      "283f2cbfa092c15e",
	"calculator/marks-full-q90":               "1b2106f13325d6f8",
	"calculator/marks768":                     "25bec69ad5f5765a",
	"counter/jpeg768":                         "e38c4e7560a78556",
	"counter/marks-full-q90":                  "1932a5e8bed6a4f6",
	"counter/marks768":                        "23e347aaa1218952",
	"dark_home/jpeg768":                       "f97d1d440bd5640f",
	"dark_home/marks-full-q90":                "bb5766bc7ec4380c",
	"dark_home/marks768":                      "6a4a55fa30a83617",
	"dark_notes/jpeg768":                      "9f82265656da2473",
	"dark_notes/marks-full-q90":               "3004c52d4614fbd1",
	"dark_notes/marks768":                     "0844cdb35d8b9699",
	"dark_settings/jpeg768":                   "4f7c21ecd033b54b",
	"dark_settings/marks-full-q90":            "0b78f8139354053c",
	"dark_settings/marks768":                  "50ce16256a3d63dc",
	"home/jpeg768":                            "a9f1362ec4819ab2",
	"home/marks-full-q90":                     "c3886f8439a8766a",
	"home/marks768":                           "ba3100016c9b20c7",
	"home_all_apps/jpeg768":                   "fd9d619739d4cd22",
	"home_all_apps/marks-full-q90":            "a29fd87c949e4304",
	"home_all_apps/marks768":                  "cb6f12fc111e5cfa",
	"notes_dialog/jpeg768":                    "ae48f9b58d70dd14",
	"notes_dialog/marks-full-q90":             "83584cb255106fc4",
	"notes_dialog/marks768":                   "8c0ab90ddb24a1a1",
	"notes_many_with_toast/jpeg768":           "1dce79db52fb206e",
	"notes_many_with_toast/marks-full-q90":    "089490cdb6cf367e",
	"notes_many_with_toast/marks768":          "77803136c0a0afa7",
	"recents/jpeg768":                         "d247acd4c0401262",
	"recents/marks-full-q90":                  "ed5956f6ccda4d34",
	"recents/marks768":                        "ba4241d36f653509",
	"settings/jpeg768":                        "3b9a07cbc97fe726",
	"settings/marks-full-q90":                 "db03846a673936ed",
	"settings/marks768":                       "25291e4b26720e01",
	"settings_about/jpeg768":                  "e83b41571e2cb87e",
	"settings_about/marks-full-q90":           "12a9eb0e200a9552",
	"settings_about/marks768":                 "e56b4be596182220",
	"settings_app_info/jpeg768":               "a945384fddcca6de",
	"settings_app_info/marks-full-q90":        "e818d76ac0297414",
	"settings_app_info/marks768":              "46f82eb1d73ab790",
	"settings_apps/jpeg768":                   "bdf039ef29fa44d5",
	"settings_apps/marks-full-q90":            "efd99538f69dcbe9",
	"settings_apps/marks768":                  "806dcb2d33776f69",
	"settings_scrolled_partly/jpeg768":        "1856174e0df5d029",
	"settings_scrolled_partly/marks-full-q90": "e84823e50b85c262",
	"settings_scrolled_partly/marks768":       "78bf0c3197b92bd2",
	"settings_scrolled_to_end/jpeg768":        "415bc7d28301abd4",
	"settings_scrolled_to_end/marks-full-q90": "7ce9e13361f8f8ac",
	"settings_scrolled_to_end/marks768":       "9c9fc7c787356147",
	"store/jpeg768":                           "d203007918d68efe",
	"store/marks-full-q90":                    "0fd4f3fc3b130b58",
	"store/marks768":                          "232dd20919c43588",
	"volume_panel/jpeg768":                    "b9e4ba78f1394b30",
	"volume_panel/marks-full-q90":             "850b4a69dd0b0fad",
	"volume_panel/marks768":                   "07b52761d6360d23",
}

// TestMarkedPicturesUnchanged: the set-of-marks pictures (JPEG at 768 px,
// at full size, and the plain JPEG for comparison) of every screen of the
// tour are the bytes recorded in markedPictureDigests.
func TestMarkedPicturesUnchanged(t *testing.T) {
	got := map[string]string{}
	for _, sc := range screens(t) {
		for _, c := range []struct {
			name  string
			opts  PictureOptions
			marks bool
		}{
			{"jpeg768", PictureOptions{MaxWidth: 768, JPEG: true, Quality: 70}, false},
			{"marks768", PictureOptions{MaxWidth: 768, JPEG: true, Quality: 70}, true},
			{"marks-full-q90", PictureOptions{JPEG: true, Quality: 90}, true},
		} {
			var pick func(Element) []Mark
			if c.marks {
				pick = func(root Element) []Mark { return numbered(clickables(root)) }
			}
			pic, err := sc.p.Picture(c.opts, pick)
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(pic.Data)
			got[sc.name+"/"+c.name] = hex.EncodeToString(sum[:8])
		}
	}
	for k, v := range got {
		if markedPictureDigests[k] != v {
			t.Errorf("%s: got digest %s; want %s", k, v, markedPictureDigests[k])
		}
	}
	if t.Failed() {
		for k, v := range got {
			fmt.Printf("\t%q: %q,\n", k, v)
		}
	}
}
