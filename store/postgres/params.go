package postgres

import (
	"fmt"
	"net/url"
	"strings"
	"sync"

	"github.com/tenure-dev/tenure/internal/typo"
)

// takeQuery checks the query of rest, a postgres:// URL without its
// password, and takes Tenure's ?table= out of it, before anything
// connects. pgx sends every parameter it does not read itself to the
// server as a setting, so a misspelt one (?sslmod=, ?serch_path=) would
// only fail there, as a server error after a round trip, and a pgx option
// spelt in another case (?SSLMode=) would go there too, setting nothing. A
// parameter must therefore be one pgx reads (pgxParams), ?options= (which
// the server reads as command-line switches, -c name=value), a PostgreSQL
// setting (settingNames, in any case, as the server compares them), or an
// extension's setting, whose name has a dot (pg_stat_statements.track).
//
// The query is read as pgx reads it: after the userinfo (which runs to an
// '@' before any '/'), pairs split at '&', keys percent-decoded with the
// spaces around them dropped. A pair pgx itself refuses (no '=', a bad
// escape) is left for pgx to report. The URL is returned unchanged unless
// it had a ?table=, which may appear once.
func takeQuery(rest string) (pgxURL, table string, err error) {
	scheme, p, _ := strings.Cut(rest, "://")
	if i := strings.IndexAny(p, "@/"); i >= 0 && p[i] == '@' {
		p = p[i+1:]
	}
	q := strings.IndexByte(p, '?')
	if q < 0 {
		return rest, "", nil
	}
	base := scheme + "://" + p[:q]
	var kept []string
	tables := 0
	for _, pair := range strings.Split(p[q+1:], "&") {
		rawKey, rawValue, found := strings.Cut(pair, "=")
		key, kerr := url.PathUnescape(rawKey)
		if !found || kerr != nil {
			kept = append(kept, pair)
			continue
		}
		key = strings.Trim(key, " ")
		if key != "table" {
			if err := checkParam(key); err != nil {
				return "", "", err
			}
			kept = append(kept, pair)
			continue
		}
		if tables++; tables > 1 {
			return "", "", fmt.Errorf("?table= given more than once")
		}
		if table, err = url.PathUnescape(rawValue); err != nil {
			return "", "", fmt.Errorf("?table= does not decode: %v", err)
		}
		table = strings.Trim(table, " ")
	}
	if tables == 0 {
		return rest, "", nil
	}
	if len(kept) == 0 {
		return base, table, nil
	}
	return base + "?" + strings.Join(kept, "&"), table, nil
}

// checkParam refuses a query parameter that neither pgx nor PostgreSQL
// knows, suggesting the known name nearest to it.
func checkParam(key string) error {
	names := knownNames()
	if _, ok := names.exact[key]; ok || strings.Contains(key, ".") {
		return nil
	}
	if _, ok := names.setting[strings.ToLower(key)]; ok {
		return nil
	}
	if near := typo.Nearest(key, names.all); near != "" {
		return fmt.Errorf("unknown parameter %q: did you mean ?%s=", key, near)
	}
	return fmt.Errorf("unknown parameter %q: neither a pgx option nor a PostgreSQL setting "+
		"(pass a setting of a newer server as ?options=-c%%20name%%3Dvalue)", key)
}

type paramNames struct {
	exact   map[string]struct{} // pgx's parameters, table and options: as spelt
	setting map[string]struct{} // PostgreSQL's settings, lower case
	all     []string            // every name, pgx's first, for suggestions
}

var knownNames = sync.OnceValue(func() paramNames {
	n := paramNames{exact: map[string]struct{}{}, setting: map[string]struct{}{}}
	for _, name := range append(strings.Fields(pgxParams), "table", "options") {
		n.exact[name] = struct{}{}
		n.all = append(n.all, name)
	}
	for _, name := range strings.Fields(settingNames) {
		n.setting[strings.ToLower(name)] = struct{}{}
		n.all = append(n.all, name)
	}
	return n
})

// pgxParams are the parameters pgx v5.13 reads itself instead of sending
// them to the server: pgconn's connection keys (notRuntimeParams in
// pgconn/config.go, with dbname, libpq's spelling of database, and ssl,
// whose value true means sslmode=require), pgx's statement cache and query
// mode (conn.go) and pgxpool's pool settings (pool.go). pgx compares them
// as spelt.
const pgxParams = `
	host port database dbname user password passfile connect_timeout
	sslmode sslkey sslcert sslcertmode sslrootcert sslnegotiation sslpassword sslsni ssl
	krbspn krbsrvname target_session_attrs service servicefile
	min_protocol_version max_protocol_version channel_binding require_auth
	statement_cache_capacity description_cache_capacity default_query_exec_mode
	pool_max_conns pool_min_conns pool_min_idle_conns pool_max_conn_lifetime
	pool_max_conn_lifetime_jitter pool_max_conn_idle_time pool_health_check_period
	pool_ping_timeout
`

// settingNames are PostgreSQL's settings (GUCs) of versions 15 to 18, so
// that a URL written for any of them passes. The server itself still
// refuses a setting newer than it is, or one that cannot be set for a
// session (max_connections).
const settingNames = pg15Settings + pg15HiddenSettings + pg16Settings + pg17Settings + pg18Settings

// pg15Settings is SELECT name FROM pg_settings ORDER BY 1 of PostgreSQL
// 15.20 (Debian 15.20-0+deb12u1, whose extension_destdir is Debian's own).
const pg15Settings = `
	allow_in_place_tablespaces allow_system_table_mods application_name archive_cleanup_command
	archive_command archive_library archive_mode archive_timeout array_nulls
	authentication_timeout autovacuum autovacuum_analyze_scale_factor
	autovacuum_analyze_threshold autovacuum_freeze_max_age autovacuum_max_workers
	autovacuum_multixact_freeze_max_age autovacuum_naptime autovacuum_vacuum_cost_delay
	autovacuum_vacuum_cost_limit autovacuum_vacuum_insert_scale_factor
	autovacuum_vacuum_insert_threshold autovacuum_vacuum_scale_factor
	autovacuum_vacuum_threshold autovacuum_work_mem backend_flush_after backslash_quote
	backtrace_functions bgwriter_delay bgwriter_flush_after bgwriter_lru_maxpages
	bgwriter_lru_multiplier block_size bonjour bonjour_name bytea_output check_function_bodies
	checkpoint_completion_target checkpoint_flush_after checkpoint_timeout checkpoint_warning
	client_connection_check_interval client_encoding client_min_messages cluster_name
	commit_delay commit_siblings composite_type_mismatch compute_query_id config_file
	constraint_exclusion cpu_index_tuple_cost cpu_operator_cost cpu_tuple_cost
	cursor_tuple_fraction data_checksums data_directory data_directory_mode data_sync_retry
	DateStyle db_user_namespace deadlock_timeout debug_assertions debug_discard_caches
	debug_pretty_print debug_print_parse debug_print_plan debug_print_rewritten
	default_statistics_target default_table_access_method default_tablespace
	default_text_search_config default_toast_compression default_transaction_deferrable
	default_transaction_isolation default_transaction_read_only dynamic_library_path
	dynamic_shared_memory_type effective_cache_size effective_io_concurrency enable_async_append
	enable_bitmapscan enable_gathermerge enable_hashagg enable_hashjoin enable_incremental_sort
	enable_indexonlyscan enable_indexscan enable_material enable_memoize enable_mergejoin
	enable_nestloop enable_parallel_append enable_parallel_hash enable_partition_pruning
	enable_partitionwise_aggregate enable_partitionwise_join enable_seqscan enable_sort
	enable_tidscan escape_string_warning event_source exit_on_error extension_destdir
	external_pid_file extra_float_digits force_parallel_mode from_collapse_limit fsync
	full_page_writes geqo geqo_effort geqo_generations geqo_pool_size geqo_seed
	geqo_selection_bias geqo_threshold gin_fuzzy_search_limit gin_pending_list_limit
	hash_mem_multiplier hba_file hot_standby hot_standby_feedback huge_page_size huge_pages
	ident_file idle_in_transaction_session_timeout idle_session_timeout ignore_checksum_failure
	ignore_invalid_pages ignore_system_indexes in_hot_standby integer_datetimes IntervalStyle
	jit jit_above_cost jit_debugging_support jit_dump_bitcode jit_expressions
	jit_inline_above_cost jit_optimize_above_cost jit_profiling_support jit_provider
	jit_tuple_deforming join_collapse_limit krb_caseins_users krb_server_keyfile lc_collate
	lc_ctype lc_messages lc_monetary lc_numeric lc_time listen_addresses lo_compat_privileges
	local_preload_libraries lock_timeout log_autovacuum_min_duration log_checkpoints
	log_connections log_destination log_directory log_disconnections log_duration
	log_error_verbosity log_executor_stats log_file_mode log_filename log_hostname
	log_line_prefix log_lock_waits log_min_duration_sample log_min_duration_statement
	log_min_error_statement log_min_messages log_parameter_max_length
	log_parameter_max_length_on_error log_parser_stats log_planner_stats
	log_recovery_conflict_waits log_replication_commands log_rotation_age log_rotation_size
	log_startup_progress_interval log_statement log_statement_sample_rate log_statement_stats
	log_temp_files log_timezone log_transaction_sample_rate log_truncate_on_rotation
	logging_collector logical_decoding_work_mem maintenance_io_concurrency maintenance_work_mem
	max_connections max_files_per_process max_function_args max_identifier_length max_index_keys
	max_locks_per_transaction max_logical_replication_workers max_parallel_maintenance_workers
	max_parallel_workers max_parallel_workers_per_gather max_pred_locks_per_page
	max_pred_locks_per_relation max_pred_locks_per_transaction max_prepared_transactions
	max_replication_slots max_slot_wal_keep_size max_stack_depth max_standby_archive_delay
	max_standby_streaming_delay max_sync_workers_per_subscription max_wal_senders max_wal_size
	max_worker_processes min_dynamic_shared_memory min_parallel_index_scan_size
	min_parallel_table_scan_size min_wal_size old_snapshot_threshold output_plugin_libraries
	parallel_leader_participation parallel_setup_cost parallel_tuple_cost password_encryption
	plan_cache_mode port post_auth_delay pre_auth_delay primary_conninfo primary_slot_name
	promote_trigger_file quote_all_identifiers random_page_cost recovery_end_command
	recovery_init_sync_method recovery_min_apply_delay recovery_prefetch recovery_target
	recovery_target_action recovery_target_inclusive recovery_target_lsn recovery_target_name
	recovery_target_time recovery_target_timeline recovery_target_xid recursive_worktable_factor
	remove_temp_files_after_crash restart_after_crash restore_command
	restrict_nonsystem_relation_kind row_security search_path segment_size seq_page_cost
	server_encoding server_version server_version_num session_preload_libraries
	session_replication_role shared_buffers shared_memory_size shared_memory_size_in_huge_pages
	shared_memory_type shared_preload_libraries ssl ssl_ca_file ssl_cert_file ssl_ciphers
	ssl_crl_dir ssl_crl_file ssl_dh_params_file ssl_ecdh_curve ssl_key_file ssl_library
	ssl_max_protocol_version ssl_min_protocol_version ssl_passphrase_command
	ssl_passphrase_command_supports_reload ssl_prefer_server_ciphers standard_conforming_strings
	statement_timeout stats_fetch_consistency superuser_reserved_connections
	synchronize_seqscans synchronous_commit synchronous_standby_names syslog_facility
	syslog_ident syslog_sequence_numbers syslog_split_messages tcp_keepalives_count
	tcp_keepalives_idle tcp_keepalives_interval tcp_user_timeout temp_buffers temp_file_limit
	temp_tablespaces TimeZone timezone_abbreviations trace_notify trace_recovery_messages
	trace_sort track_activities track_activity_query_size track_commit_timestamp track_counts
	track_functions track_io_timing track_wal_io_timing transaction_deferrable
	transaction_isolation transaction_read_only transform_null_equals unix_socket_directories
	unix_socket_group unix_socket_permissions update_process_title vacuum_cost_delay
	vacuum_cost_limit vacuum_cost_page_dirty vacuum_cost_page_hit vacuum_cost_page_miss
	vacuum_defer_cleanup_age vacuum_failsafe_age vacuum_freeze_min_age vacuum_freeze_table_age
	vacuum_multixact_failsafe_age vacuum_multixact_freeze_min_age
	vacuum_multixact_freeze_table_age wal_block_size wal_buffers wal_compression
	wal_consistency_checking wal_decode_buffer_size wal_init_zero wal_keep_size wal_level
	wal_log_hints wal_receiver_create_temp_slot wal_receiver_status_interval
	wal_receiver_timeout wal_recycle wal_retrieve_retry_interval wal_segment_size
	wal_sender_timeout wal_skip_threshold wal_sync_method wal_writer_delay
	wal_writer_flush_after work_mem xmlbinary xmloption zero_damaged_pages`

// pg15HiddenSettings are settings that pg_settings does not list
// (GUC_NO_SHOW_ALL) but a connection may name, from PostgreSQL 15's
// src/backend/utils/misc/guc_tables.c.
const pg15HiddenSettings = `
	default_with_oids is_superuser role seed session_authorization ssl_renegotiation_limit`

// pg16Settings are the settings PostgreSQL 16 added, from guc_tables.c at
// the REL_16_STABLE branch point and in 16.2, less those of debug builds
// only (LOCK_DEBUG, WAL_DEBUG, …); likewise for 17 and 18.
const pg16Settings = `
	createrole_self_grant debug_io_direct debug_logical_replication_streaming
	debug_parallel_query enable_presorted_aggregate gss_accept_delegation icu_validation_level
	max_parallel_apply_workers_per_subscription reserved_connections scram_iterations
	send_abort_for_crash send_abort_for_kill vacuum_buffer_usage_limit`

// pg17Settings are the settings PostgreSQL 17 added, from guc_tables.c of
// 17.4.
const pg17Settings = `
	allow_alter_system commit_timestamp_buffers enable_group_by_reordering event_triggers
	huge_pages_status io_combine_limit max_notify_queue_pages multixact_member_buffers
	multixact_offset_buffers notify_buffers serializable_buffers subtransaction_buffers
	summarize_wal sync_replication_slots synchronized_standby_slots trace_connection_negotiation
	transaction_buffers transaction_timeout wal_summary_keep_time`

// pg18Settings are the settings PostgreSQL 18 added, from guc_tables.c of
// 18.3.
const pg18Settings = `
	autovacuum_vacuum_max_threshold autovacuum_worker_slots enable_distinct_reordering
	enable_self_join_elimination extension_control_path file_copy_method file_extend_method
	idle_replication_slot_timeout io_max_combine_limit io_max_concurrency io_method io_workers
	log_lock_failures max_active_replication_origins md5_password_warnings num_os_semaphores
	oauth_validator_libraries ssl_groups ssl_tls13_ciphers track_cost_delay_timing
	vacuum_max_eager_freeze_failure_rate vacuum_truncate`
