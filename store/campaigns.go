package store

// Campaigns: the catalog ('k', one record), the campaigns ('p', by
// campana_id) and their budget counters ('b', by campana_id), JSON written
// by the engine.

// CatalogKey is the key of the tenant's catalog.
func CatalogKey(tenant string) []byte { return tableKey(tenant, tableCatalog, 0) }

// CampaignKey is the key of campaign id.
func CampaignKey(tenant, id string) []byte {
	return appendStr(tableKey(tenant, tableCampaign, len(id)+1), id)
}

// BudgetKey is the key of the budget counters of campaign id.
func BudgetKey(tenant, id string) []byte {
	return appendStr(tableKey(tenant, tableBudget, len(id)+1), id)
}
