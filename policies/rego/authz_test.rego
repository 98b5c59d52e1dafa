# Unit tests for data.ignara.authz. Fixtures: fixtures_test.rego.
#
# Portable style (see README.md): override input key by key, and bind fixtures
# to locals before `with data...`.
package ignara.authz_test

import data.ignara.authz
import data.ignara.fixtures_test as fx

test_member_submits_to_own_tenant if {
	tenants := fx.tenants
	d := authz.decision with input.principal as fx.alice
		with input.action as "workloads.submit"
		with input.resource as {"tenant": "acme"}
		with data.ignara.tenants as tenants
	d == fx.allowed
}

test_member_reads_lists_and_cancels_own_workloads if {
	tenants := fx.tenants
	every action in ["workloads.list", "workloads.read", "workloads.cancel", "workloads.logs", "quota.read"] {
		d := authz.decision with input.principal as fx.alice
			with input.action as action
			with input.resource as {"tenant": "acme", "id": "wl-1"}
			with data.ignara.tenants as tenants
		d == fx.allowed
	}
}

test_member_cannot_read_another_tenants_workload if {
	tenants := fx.tenants
	d := authz.decision with input.principal as fx.gary
		with input.action as "workloads.read"
		with input.resource as {"tenant": "acme", "id": "wl-1"}
		with data.ignara.tenants as tenants
	d == {
		"allow": false,
		"reasons": ["principal of tenant \"globex\" may not act on resources of tenant \"acme\""],
	}
}

test_member_cannot_submit_into_another_tenant if {
	tenants := fx.tenants
	d := authz.decision with input.principal as fx.gary
		with input.action as "workloads.submit"
		with input.resource as {"tenant": "acme"}
		with data.ignara.tenants as tenants
	d.allow == false
	d.reasons == ["principal of tenant \"globex\" may not spend the quota of tenant \"acme\""]
}

test_member_cannot_manage_keys if {
	tenants := fx.tenants
	d := authz.decision with input.principal as fx.alice
		with input.action as "keys.create"
		with input.resource as {"tenant": "acme", "roles": ["member"], "scopes": ["inference"]}
		with data.ignara.tenants as tenants
	d.allow == false
	"roles [member] do not permit \"keys.create\"; it needs one of: admin, tenant-admin" in d.reasons
}

test_tenant_admin_manages_own_member_keys if {
	tenants := fx.tenants
	every action in ["keys.list", "keys.create", "keys.revoke"] {
		d := authz.decision with input.principal as fx.amy
			with input.action as action
			with input.resource as {"tenant": "acme", "id": "key-1", "roles": ["member"], "scopes": ["inference"]}
			with data.ignara.tenants as tenants
		d == fx.allowed
	}
}

test_tenant_admin_cannot_manage_another_tenants_keys if {
	tenants := fx.tenants
	d := authz.decision with input.principal as fx.amy
		with input.action as "keys.revoke"
		with input.resource as {"tenant": "globex", "id": "key-9", "roles": ["member"]}
		with data.ignara.tenants as tenants
	d.allow == false
	d.reasons == ["principal of tenant \"acme\" may not act on resources of tenant \"globex\""]
}

test_member_cannot_reach_admin_routes if {
	tenants := fx.tenants
	d := authz.decision with input.principal as fx.alice
		with input.action as "admin.tenants.list"
		with data.ignara.tenants as tenants
	d.allow == false
	d.reasons == [
		"action \"admin.tenants.list\" needs the admin role",
		"scopes [inference, usage:read, workloads:read, workloads:write] do not permit \"admin.tenants.list\"; it needs scope \"admin\"",
	]
}

test_tenant_admin_cannot_reach_admin_routes if {
	tenants := fx.tenants
	d := authz.decision with input.principal as fx.amy
		with input.action as "admin.flavors.update"
		with data.ignara.tenants as tenants
	d.reasons == [
		"action \"admin.flavors.update\" needs the admin role",
		"scopes [inference, keys:read, keys:write, usage:read, workloads:read, workloads:write] do not permit \"admin.flavors.update\"; it needs scope \"admin\"",
	]
}

test_admin_reaches_admin_routes if {
	tenants := fx.tenants
	d := authz.decision with input.principal as fx.root
		with input.action as "admin.tenants.create"
		with data.ignara.tenants as tenants
	d == fx.allowed
}

test_admin_reads_and_cancels_any_tenants_workloads if {
	tenants := fx.tenants
	every action in ["workloads.read", "workloads.cancel", "keys.revoke"] {
		d := authz.decision with input.principal as fx.root
			with input.action as action
			with input.resource as {"tenant": "globex", "id": "x", "roles": ["tenant-admin"]}
			with data.ignara.tenants as tenants
		d == fx.allowed
	}
}

test_admin_cannot_spend_another_tenants_quota if {
	tenants := fx.tenants
	d := authz.decision with input.principal as fx.root
		with input.action as "inference.call"
		with input.resource as {"tenant": "acme"}
		with data.ignara.tenants as tenants
	d.allow == false
	d.reasons == ["\"inference.call\" spends quota and needs a principal of tenant \"acme\""]
}

test_unknown_action_is_denied if {
	tenants := fx.tenants
	d := authz.decision with input.principal as fx.root
		with input.action as "workloads.delete_everything"
		with input.resource as {"tenant": "acme"}
		with data.ignara.tenants as tenants
	d.allow == false
	d.reasons == ["unknown action \"workloads.delete_everything\""]
}

test_missing_principal_and_action_are_denied if {
	tenants := fx.tenants
	d := authz.decision with input.resource as {"tenant": "acme"}
		with data.ignara.tenants as tenants
	d.allow == false
	d.reasons == ["input.action is missing or not a string", "input.principal is missing or not an object"]
}

test_roles_must_be_an_array if {
	tenants := fx.tenants
	d := authz.decision with input.principal as {"id": "eve", "tenant": "acme", "roles": "admin"}
		with input.action as "admin.tenants.create"
		with data.ignara.tenants as tenants
	d.allow == false
	"input.principal.roles must be an array of strings" in d.reasons
}

test_resource_tenant_is_required if {
	tenants := fx.tenants
	d := authz.decision with input.principal as fx.alice
		with input.action as "workloads.list"
		with data.ignara.tenants as tenants
	d.reasons == ["action \"workloads.list\" needs input.resource.tenant"]
}

test_suspended_tenant_is_denied if {
	tenants := fx.tenants
	d := authz.decision with input.principal as fx.ian
		with input.action as "workloads.list"
		with input.resource as {"tenant": "initech"}
		with data.ignara.tenants as tenants
	d.reasons == ["tenant \"initech\" is suspended"]
}

test_unknown_tenant_is_denied if {
	tenants := fx.tenants
	d := authz.decision with input.principal as {"id": "mallory", "tenant": "umbrella", "roles": ["member"], "scopes": ["workloads:read"]}
		with input.action as "workloads.list"
		with input.resource as {"tenant": "umbrella"}
		with data.ignara.tenants as tenants
	d.reasons == ["tenant \"umbrella\" is not known to the gateway"]
}

test_principal_without_tenant_is_denied if {
	tenants := fx.tenants
	d := authz.decision with input.principal as {"id": "svc", "roles": ["member"], "scopes": ["inference"]}
		with input.action as "models.list"
		with input.resource as {"tenant": "acme"}
		with data.ignara.tenants as tenants
	d.reasons == ["principal \"svc\" belongs to no tenant"]
}

# --- Scopes --------------------------------------------------------------------------

test_each_action_needs_its_scope if {
	tenants := fx.tenants
	every action, scope in authz.action_scopes {
		allowed := authz.decision with input.principal as {"id": "k", "tenant": "acme", "roles": ["tenant-admin"], "scopes": [scope]}
			with input.action as action
			with input.resource as {"tenant": "acme", "roles": ["member"], "scopes": [scope]}
			with data.ignara.tenants as tenants
		allowed == fx.allowed
	}
}

test_a_usage_reader_may_only_read_usage if {
	tenants := fx.tenants
	every action in ["workloads.submit", "workloads.list", "workloads.cancel", "inference.call", "models.list"] {
		d := authz.decision with input.principal as fx.reader
			with input.action as action
			with input.resource as {"tenant": "acme"}
			with data.ignara.tenants as tenants
		d.allow == false
		d.reasons == [sprintf("scopes [usage:read] do not permit \"%s\"; it needs scope \"%s\"", [action, authz.action_scopes[action]])]
	}
	d := authz.decision with input.principal as fx.reader
		with input.action as "usage.read"
		with input.resource as {"tenant": "acme"}
		with data.ignara.tenants as tenants
	d == fx.allowed
}

test_admin_routes_need_the_admin_scope if {
	tenants := fx.tenants
	d := authz.decision with input.principal as {"id": "root", "roles": ["admin"], "scopes": ["keys:read", "keys:write"]}
		with input.action as "admin.tenants.delete"
		with data.ignara.tenants as tenants
	d.reasons == ["scopes [keys:read, keys:write] do not permit \"admin.tenants.delete\"; it needs scope \"admin\""]
}

test_missing_scopes_allow_nothing if {
	tenants := fx.tenants
	d := authz.decision with input.principal as {"id": "old", "tenant": "acme", "roles": ["member"]}
		with input.action as "workloads.list"
		with input.resource as {"tenant": "acme"}
		with data.ignara.tenants as tenants
	d.allow == false
	d.reasons == ["input.principal.scopes must be an array of strings"]
}

# --- The platform role belongs to no tenant ----------------------------------------------

test_a_tenant_principal_claiming_admin_gets_no_admin_route if {
	tenants := fx.tenants
	d := authz.decision with input.principal as fx.mallory
		with input.action as "admin.tenants.list"
		with data.ignara.tenants as tenants
	d.reasons == ["action \"admin.tenants.list\" needs a platform admin; the admin role of a principal of tenant \"acme\" grants nothing (platform admin keys belong to no tenant)"]
}

test_a_tenant_principal_claiming_admin_reaches_no_other_tenant if {
	tenants := fx.tenants
	d := authz.decision with input.principal as fx.mallory
		with input.action as "workloads.read"
		with input.resource as {"tenant": "globex"}
		with data.ignara.tenants as tenants
	d.allow == false
	"principal of tenant \"acme\" may not act on resources of tenant \"globex\"" in d.reasons
}

test_a_tenant_principal_claiming_admin_has_no_tenant_role_either if {
	tenants := fx.tenants
	d := authz.decision with input.principal as fx.mallory
		with input.action as "workloads.submit"
		with input.resource as {"tenant": "acme"}
		with data.ignara.tenants as tenants
	d.reasons == ["roles [admin] do not permit \"workloads.submit\"; it needs one of: admin, member, tenant-admin"]
}

# --- Who issues and revokes which key ---------------------------------------------------

test_tenant_admin_cannot_issue_or_revoke_keys_at_its_own_rank_or_above if {
	tenants := fx.tenants
	every action in ["keys.create", "keys.revoke"] {
		every role in ["tenant-admin", "admin", "owner"] {
			d := authz.decision with input.principal as fx.amy
				with input.action as action
				with input.resource as {"tenant": "acme", "roles": ["member", role], "scopes": ["inference"]}
				with data.ignara.tenants as tenants
			d.allow == false
			d.reasons == [sprintf("role \"%s\" is not below the caller's own (roles [tenant-admin]): only a platform admin may create or revoke such a key", [role])]
		}
	}
}

test_key_actions_need_the_keys_roles_and_scopes if {
	tenants := fx.tenants
	d := authz.decision with input.principal as fx.amy
		with input.action as "keys.create"
		with input.resource as {"tenant": "acme"}
		with data.ignara.tenants as tenants
	d.reasons == [
		"action \"keys.create\" needs input.resource.roles (an array of strings)",
		"action \"keys.create\" needs input.resource.scopes (an array of strings)",
	]
}

test_a_key_grants_no_scope_its_issuer_lacks if {
	tenants := fx.tenants
	d := authz.decision with input.principal as {"id": "amy", "tenant": "acme", "roles": ["tenant-admin"], "scopes": ["keys:write"]}
		with input.action as "keys.create"
		with input.resource as {"tenant": "acme", "roles": ["member"], "scopes": ["inference", "usage:read"]}
		with data.ignara.tenants as tenants
	d.reasons == [
		"the caller's key lacks scope \"inference\", so it cannot grant it",
		"the caller's key lacks scope \"usage:read\", so it cannot grant it",
	]
}

test_platform_admin_issues_tenant_admin_keys_for_any_tenant if {
	tenants := fx.tenants
	d := authz.decision with input.principal as fx.root
		with input.action as "keys.create"
		with input.resource as {"tenant": "globex", "roles": ["tenant-admin"], "scopes": fx.tenant_admin_scopes}
		with data.ignara.tenants as tenants
	d == fx.allowed
}

test_only_a_platform_admin_issues_platform_keys if {
	tenants := fx.tenants
	resource := {"roles": ["admin"], "scopes": ["admin"]}
	d := authz.decision with input.principal as fx.root
		with input.action as "admin.keys.create"
		with input.resource as resource
		with data.ignara.tenants as tenants
	d == fx.allowed
	e := authz.decision with input.principal as fx.amy
		with input.action as "admin.keys.create"
		with input.resource as resource
		with data.ignara.tenants as tenants
	e.allow == false
	"action \"admin.keys.create\" needs the admin role" in e.reasons
}

test_a_member_with_every_scope_still_issues_no_key if {
	tenants := fx.tenants
	all_scopes := fx.all_scopes
	d := authz.decision with input.principal as {"id": "alice", "tenant": "acme", "roles": ["member"], "scopes": all_scopes}
		with input.action as "keys.create"
		with input.resource as {"tenant": "acme", "roles": ["member"], "scopes": ["inference"]}
		with data.ignara.tenants as tenants
	d.allow == false
	"roles [member] do not permit \"keys.create\"; it needs one of: admin, tenant-admin" in d.reasons
	"role \"member\" is not below the caller's own (roles [member]): only a platform admin may create or revoke such a key" in d.reasons
}

test_tenant_admin_reads_live_state_of_own_tenant_only if {
	tenants := fx.tenants
	own := authz.decision with input.principal as fx.amy
		with input.action as "live.read"
		with input.resource as {"tenant": "acme"}
		with data.ignara.tenants as tenants
	own == fx.allowed
	other := authz.decision with input.principal as fx.amy
		with input.action as "live.read"
		with input.resource as {"tenant": "globex"}
		with data.ignara.tenants as tenants
	other.allow == false
	member := authz.decision with input.principal as fx.alice
		with input.action as "live.read"
		with input.resource as {"tenant": "acme"}
		with data.ignara.tenants as tenants
	member.allow == false
	"roles [member] do not permit \"live.read\"; it needs one of: admin, tenant-admin" in member.reasons
}

test_tenant_admin_reads_own_tenant_and_principals_only if {
	tenants := fx.tenants
	every action in ["tenants.read", "principals.read", "audit.read"] {
		own := authz.decision with input.principal as fx.amy
			with input.action as action
			with input.resource as {"tenant": "acme"}
			with data.ignara.tenants as tenants
		own == fx.allowed
		other := authz.decision with input.principal as fx.amy
			with input.action as action
			with input.resource as {"tenant": "globex"}
			with data.ignara.tenants as tenants
		other.allow == false
		member := authz.decision with input.principal as fx.alice
			with input.action as action
			with input.resource as {"tenant": "acme"}
			with data.ignara.tenants as tenants
		member.allow == false
	}
}
