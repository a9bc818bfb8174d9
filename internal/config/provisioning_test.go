package config

import (
	"strings"
	"testing"
)

func TestProvisioningDefaults(t *testing.T) {
	c, err := load(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.StripeSecretKey != "" || c.StripeAPIBase != "" || c.StripeWebhookSecret != "" || c.CatalogFile != "" {
		t.Fatalf("got key %q base %q webhook secret %q catalog %q; want all unset", c.StripeSecretKey, c.StripeAPIBase, c.StripeWebhookSecret, c.CatalogFile)
	}
	if c.RequireReverification || c.RefuseOutOfStock || c.PAYGDeviceLimit != 2 {
		t.Fatalf("got reverification %v, refuse out of stock %v, payg limit %d; want false, false, 2",
			c.RequireReverification, c.RefuseOutOfStock, c.PAYGDeviceLimit)
	}
}

func TestProvisioningSettings(t *testing.T) {
	c, err := load(map[string]string{
		"SERVICE_STRIPE_SECRET_KEY":      "sk_test_123",
		"SERVICE_STRIPE_API_BASE":        "http://127.0.0.1:12111/",
		"SERVICE_STRIPE_WEBHOOK_SECRET":  "whsec_abc",
		"SERVICE_CATALOG_FILE":           "/etc/phonefleet/catalog.json",
		"SERVICE_REQUIRE_REVERIFICATION": "true",
		"SERVICE_REFUSE_OUT_OF_STOCK":    "true",
		"SERVICE_PAYG_DEVICE_LIMIT":      "5",
	}, "-payg-device-limit", "7", "-stripe-secret-key", "sk_test_flag")
	if err != nil {
		t.Fatal(err)
	}
	if c.StripeSecretKey != "sk_test_flag" || c.StripeAPIBase != "http://127.0.0.1:12111" || c.StripeWebhookSecret != "whsec_abc" ||
		c.CatalogFile != "/etc/phonefleet/catalog.json" || !c.RequireReverification || !c.RefuseOutOfStock || c.PAYGDeviceLimit != 7 {
		t.Fatalf("got %+v; want the settings given, flags winning, the base without its trailing slash", c)
	}
}

func TestInvalidProvisioningSettingsNameThemselves(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"api base", map[string]string{"SERVICE_STRIPE_API_BASE": "127.0.0.1:12111"}, "SERVICE_STRIPE_API_BASE"},
		{"reverification", map[string]string{"SERVICE_REQUIRE_REVERIFICATION": "sometimes"}, "SERVICE_REQUIRE_REVERIFICATION"},
		{"out of stock", map[string]string{"SERVICE_REFUSE_OUT_OF_STOCK": "maybe"}, "SERVICE_REFUSE_OUT_OF_STOCK"},
		{"payg limit", map[string]string{"SERVICE_PAYG_DEVICE_LIMIT": "-1"}, "SERVICE_PAYG_DEVICE_LIMIT"},
		// Zero is refused rather than read as the default 2 (the pool's
		// own setting serves no devices: a catalog without a pool).
		{"payg limit zero", map[string]string{"SERVICE_PAYG_DEVICE_LIMIT": "0"}, "SERVICE_PAYG_DEVICE_LIMIT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v; want an error naming %s", err, tc.want)
			}
		})
	}
}
