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
		with input.resource as {"tenant": "acme"}
		with data.ignara.tenants as tenants
	d.allow == false
	d.reasons == ["roles [member] do not permit \"keys.create\"; it needs one of: admin, tenant-admin"]
}

test_tenant_admin_manages_own_keys if {
	tenants := fx.tenants
	every action in ["keys.list", "keys.create", "keys.revoke"] {
		d := authz.decision with input.principal as fx.amy
			with input.action as action
			with input.resource as {"tenant": "acme", "id": "key-1"}
			with data.ignara.tenants as tenants
		d == fx.allowed
	}
}

test_tenant_admin_cannot_manage_another_tenants_keys if {
	tenants := fx.tenants
	d := authz.decision with input.principal as fx.amy
		with input.action as "keys.revoke"
		with input.resource as {"tenant": "globex", "id": "key-9"}
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
	d.reasons == ["action \"admin.tenants.list\" needs the admin role"]
}

test_tenant_admin_cannot_reach_admin_routes if {
	tenants := fx.tenants
	d := authz.decision with input.principal as fx.amy
		with input.action as "admin.flavors.update"
		with data.ignara.tenants as tenants
	d.reasons == ["action \"admin.flavors.update\" needs the admin role"]
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
			with input.resource as {"tenant": "globex", "id": "x"}
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
	d := authz.decision with input.principal as {"id": "mallory", "tenant": "umbrella", "roles": ["member"]}
		with input.action as "workloads.list"
		with input.resource as {"tenant": "umbrella"}
		with data.ignara.tenants as tenants
	d.reasons == ["tenant \"umbrella\" is not known to the gateway"]
}

test_principal_without_tenant_is_denied if {
	tenants := fx.tenants
	d := authz.decision with input.principal as {"id": "svc", "roles": ["member"]}
		with input.action as "models.list"
		with input.resource as {"tenant": "acme"}
		with data.ignara.tenants as tenants
	d.reasons == ["principal \"svc\" belongs to no tenant"]
}
