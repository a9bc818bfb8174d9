package service

import (
	"strings"
	"testing"

	"phonefleet/domain"
)

// TestCheckSimModels: a price list naming a sku's simModel the simulator
// does not have stops start-up, naming the sku and the models it has; a
// known one, or none, passes.
func TestCheckSimModels(t *testing.T) {
	c := domain.DefaultCatalog()
	if err := checkSimModels(c); err != nil {
		t.Fatalf("default catalog: %v", err)
	}
	c.Skus[0].SimModel = "Compact"
	if err := checkSimModels(c); err != nil {
		t.Fatalf("simModel Compact: %v", err)
	}
	c.Skus[0].SimModel = "Pixel9000"
	err := checkSimModels(c)
	if err == nil || !strings.Contains(err.Error(), c.Skus[0].Sku) || !strings.Contains(err.Error(), "Pixel7") {
		t.Fatalf("unknown simModel: got %v; want an error naming the sku and the simulator's models", err)
	}
}
