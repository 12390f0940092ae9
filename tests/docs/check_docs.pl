#!/usr/bin/perl
# tests/docs/check_docs.pl — docs that cannot rot (issue 38).
#
#   check_docs.pl code  --src DIR --include DIR… --cc CC [--cxx CXX]
#                       [--codegen WK_CODEGEN] [--cflags "…"] [--file F.md…]
#                       [--keep] -- LINK ARGS…
#   check_docs.pl links --src DIR
#
# code: every ```c block of README.md and docs/*.md is compiled with
# -std=c11 -Wall -Wextra -Werror against the in-tree headers, by the
# block's info string (docs/testing.md, "Code blocks in the docs"):
#
#   ```c              a whole translation unit, compiled as it stands
#   ```c run          the same, then linked and run against a redis-server
#                     this script starts (its URL in $WK_REDIS_URL); it
#                     must exit 0
#   ```c fragment     file-scope code: compiled after tests/docs/prelude.h,
#                     which declares the names a guide takes as given
#   ```c body         statements: compiled as the body of a function after
#                     the prelude (leading #include lines go before it)
#   ```c nocompile    not compiled; the paragraph right before the block
#                     must say why, visibly: "(not compiled: …)"
#   … cxx             (with any of the first four) compiled as C++20 too
#
# A ```json schema block is a code-generation schema: it is run through
# wk-codegen and the generated header is on the include path of every C
# block after it in the same file.
#
# Compiler messages name the Markdown file and line (#line directives).
#
# links: every relative link of the Markdown files of the tree must name a
# file or directory that exists, and an #anchor must name a heading of the
# Markdown file it points into (GitHub's slugs: lower case, punctuation
# dropped, spaces to hyphens, "-1", "-2" … for repeats).
#
# Exit status 0 when everything holds, 1 with every failure listed.
use strict;
use warnings;
use utf8;
use File::Basename qw(dirname basename);
use File::Path qw(make_path);
use File::Spec;
use File::Temp qw(tempdir);
use Getopt::Long qw(GetOptionsFromArray);
use IO::Socket::INET;
use POSIX qw(WNOHANG);

binmode STDOUT, ':encoding(UTF-8)';
binmode STDERR, ':encoding(UTF-8)';

my $mode = shift @ARGV // '';
my %opt = (include => [], cflags => '');
GetOptionsFromArray(\@ARGV, \%opt, 'src=s', 'include=s@', 'cc=s', 'cxx=s', 'codegen=s',
                    'cflags=s', 'file=s@', 'keep')
    or die "usage: see the banner of $0\n";
my @link = @ARGV;
die "check_docs.pl: --src is required\n" unless $opt{src};
my $src = File::Spec->rel2abs($opt{src});

if ($mode eq 'code') {
    exit code_check();
} elsif ($mode eq 'links') {
    exit link_check();
}
die "usage: check_docs.pl code|links --src DIR …\n";

sub slurp {
    my ($path) = @_;
    open(my $fh, '<:encoding(UTF-8)', $path) or die "$path: $!\n";
    local $/;
    my $text = <$fh>;
    return $text;
}

# The fenced blocks of a Markdown file: info string, words, the line of
# the opening fence (1-based), the body lines (the fence's indentation
# taken off) and the paragraph right before the fence.
sub fenced_blocks {
    my ($path) = @_;
    my @lines = split /\n/, slurp($path), -1;
    my (@blocks, $open, $ended);
    my $before = '';
    for my $i (0 .. $#lines) {
        my $l = $lines[$i];
        if (!$open) {
            if ($l =~ /^( *)(`{3,}|~{3,})\s*([^\s`]*)\s*(.*?)\s*$/) {
                $open = {indent => length($1), fence => $2, lang => $3,
                         words => [split ' ', $4], line => $i + 1, body => [],
                         before => $before};
            } elsif ($l =~ /\S/) {
                $before = '' if $ended;
                $ended = 0;
                $before .= ($before eq '' ? '' : ' ') . $l;
            } else {
                $ended = 1;
            }
            next;
        }
        if ($l =~ /^ *(`{3,}|~{3,})\s*$/ && substr($1, 0, 1) eq substr($open->{fence}, 0, 1)
            && length($1) >= length($open->{fence})) {
            push @blocks, $open;
            undef $open;
            $before = '';
            next;
        }
        my $strip = $open->{indent};
        $l =~ s/^ {0,$strip}//;
        push @{$open->{body}}, $l;
    }
    push @blocks, $open if $open; # an unclosed fence runs to the end
    return @blocks;
}

sub run_quiet {
    my ($cmd, $out) = @_;
    my $pid = open(my $fh, '-|');
    die "fork: $!\n" unless defined $pid;
    if (!$pid) {
        open(STDERR, '>&', \*STDOUT);
        exec @$cmd or do { print "exec $cmd->[0]: $!\n"; POSIX::_exit(127) };
    }
    local $/;
    my $text = <$fh> // '';
    close $fh;
    $$out = $text if $out;
    return $? >> 8;
}

# ---------------------------------------------------------------- code

sub code_check {
    for my $need (qw(cc)) {
        die "check_docs.pl code: --$need is required\n" unless $opt{$need};
    }
    my $tmp = tempdir('wk-docs-XXXXXX', TMPDIR => 1, CLEANUP => !$opt{keep});
    print "work directory: $tmp\n" if $opt{keep};
    my @files = $opt{file} ? @{$opt{file}}
                           : ('README.md', map { "docs/" . basename($_) } sort glob("$src/docs/*.md"));
    local $ENV{LC_ALL} = 'C';    # plain quotes in the compilers' messages
    my @inc = map { ('-I', $_) } ("$src/tests/docs", "$src/include", @{$opt{include}});
    my @cflags = split ' ', $opt{cflags};
    my @c = ($opt{cc}, '-std=c11', '-Wall', '-Wextra', '-Werror', @cflags);
    my @cxx = $opt{cxx} ? ($opt{cxx}, '-std=c++20', '-Wall', '-Wextra', '-Werror', @cflags, '-x', 'c++') : ();
    my (@failures, @runnable);
    my %count = (whole => 0, fragment => 0, body => 0, nocompile => 0, cxx => 0, run => 0, schema => 0);
    my $n = 0;
    for my $rel (@files) {
        my @gen;    # include directories of the schemas met so far in this file
        for my $b (fenced_blocks("$src/$rel")) {
            my $where = "$rel:$b->{line}";
            if ($b->{lang} eq 'json' && grep { $_ eq 'schema' } @{$b->{words}}) {
                $n++;
                $count{schema}++;
                my $text = join("\n", @{$b->{body}}) . "\n";
                my ($service) = $text =~ /"service"\s*:\s*"([^"]+)"/;
                if (!$opt{codegen}) {
                    push @failures, "$where: a schema block, and no --codegen given";
                    next;
                }
                if (!$service) {
                    push @failures, "$where: a schema block without \"service\"";
                    next;
                }
                my $dir = "$tmp/gen$n";
                make_path($dir);
                write_file("$dir/$service.json", $text);
                my $out;
                if (run_quiet([$opt{codegen}, "$dir/$service.json", '-o', $dir], \$out)) {
                    push @failures, "$where: wk-codegen refused the schema:\n$out";
                    next;
                }
                push @gen, $dir;
                next;
            }
            next unless $b->{lang} eq 'c';
            my %w;
            my $unknown = 0;
            for my $word (@{$b->{words}}) {
                if ($word !~ /^(run|fragment|body|nocompile|cxx)$/) {
                    push @failures, "$where: unknown word \"$word\" in the info string "
                        . "(c [run|fragment|body|nocompile] [cxx])";
                    $unknown = 1;
                }
                $w{$word} = 1;
            }
            next if $unknown;
            my $kinds = grep { $w{$_} } qw(run fragment body nocompile);
            if ($kinds > 1) {
                push @failures, "$where: run, fragment, body and nocompile exclude each other";
                next;
            }
            if ($w{nocompile}) {
                $count{nocompile}++;
                push @failures, "$where: the paragraph right before a nocompile block must "
                    . "say why, \"(not compiled: …)\"; it is: $b->{before}"
                    unless $b->{before} =~ /\(not compiled: /;
                push @failures, "$where: nocompile and cxx exclude each other" if $w{cxx};
                next;
            }
            $n++;
            my $kind = $w{fragment} ? 'fragment' : $w{body} ? 'body' : 'whole';
            $count{$kind}++;
            my $unit = unit_text($b, $rel, $kind);
            my $base = "$tmp/block$n";
            write_file("$base.c", $unit);
            my @gi = map { ('-I', $_) } @gen;
            my $out;
            if (run_quiet([@c, @inc, @gi, '-c', "$base.c", '-o', "$base.o"], \$out)) {
                push @failures, "$where: does not compile as C11 ($kind):\n$out";
                next;
            }
            if ($w{cxx}) {
                $count{cxx}++;
                if (!@cxx) {
                    print "note: $where: marked cxx, not compiled as C++20 (no --cxx: no g++ found)\n";
                } elsif (run_quiet([@cxx, @inc, @gi, '-c', "$base.c", '-o', "$base.cxx.o"], \$out)) {
                    push @failures, "$where: does not compile as C++20:\n$out";
                    next;
                }
            }
            if ($w{run}) {
                $count{run}++;
                if (run_quiet([$opt{cc}, @cflags, "$base.o", '-o', $base, @link], \$out)) {
                    push @failures, "$where: does not link:\n$out";
                    next;
                }
                push @runnable, [$where, $base];
            }
        }
    }
    if (@runnable) {
        my ($pid, $url) = start_redis($tmp);
        if (!$pid) {
            push @failures, "could not start a redis-server for the runnable blocks";
        } else {
            for my $r (@runnable) {
                my ($where, $exe) = @$r;
                local $ENV{WK_REDIS_URL} = $url;
                my $out;
                my $rc = run_quiet(['timeout', '60', $exe], \$out);
                print "$where: ran against $url, exit $rc\n$out";
                push @failures, "$where: the program exited $rc:\n$out" if $rc;
            }
            kill 'TERM', $pid;
            waitpid($pid, 0);
        }
    }
    printf "%d C blocks: %d whole (%d run), %d fragments, %d bodies, %d not compiled; %d also as C++20; %d schemas\n",
        $count{whole} + $count{fragment} + $count{body} + $count{nocompile}, $count{whole},
        $count{run}, $count{fragment}, $count{body}, $count{nocompile}, $count{cxx}, $count{schema};
    return report(@failures);
}

sub write_file {
    my ($path, $text) = @_;
    open(my $fh, '>:encoding(UTF-8)', $path) or die "$path: $!\n";
    print $fh $text;
    close $fh;
}

sub unit_text {
    my ($b, $rel, $kind) = @_;
    my @body = @{$b->{body}};
    my $first = $b->{line} + 1;
    return qq(#line $first "$rel"\n) . join("\n", @body) . "\n" if $kind eq 'whole';
    my $text = qq(#include "prelude.h"\n);
    return $text . qq(#line $first "$rel"\n) . join("\n", @body) . "\n" if $kind eq 'fragment';
    # body: leading #include lines (and blank lines) stay at file scope
    my $i = 0;
    while ($i < @body && $body[$i] =~ /^\s*(#\s*include\b.*)?$/) {
        my $line = $first + $i;
        $text .= qq(#line $line "$rel"\n$body[$i]\n);
        $i++;
    }
    my $line = $first + $i;
    $text .= "void wk_doc_block_$b->{line}(void);\nvoid wk_doc_block_$b->{line}(void)\n{\n";
    $text .= qq(#line $line "$rel"\n) . join("\n", @body[$i .. $#body]) . "\n}\n";
    return $text;
}

sub start_redis {
    my ($tmp) = @_;
    for my $attempt (1 .. 10) {
        my $port = 20000 + int(rand(30000));
        my $pid = fork();
        die "fork: $!\n" unless defined $pid;
        if (!$pid) {
            open(STDOUT, '>', "$tmp/redis.log");
            open(STDERR, '>&', \*STDOUT);
            exec('redis-server', '--port', $port, '--bind', '127.0.0.1', '--save', '',
                 '--appendonly', 'no', '--dir', $tmp, '--daemonize', 'no', '--loglevel',
                 'warning') or POSIX::_exit(127);
        }
        for (1 .. 100) {
            my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Timeout => 1);
            if ($s) {
                print $s "PING\r\n";
                my $reply = <$s> // '';
                close $s;
                return ($pid, "redis://127.0.0.1:$port") if $reply =~ /^\+PONG/;
            }
            last if waitpid($pid, WNOHANG) == $pid;
            select(undef, undef, undef, 0.05);
        }
        kill 'TERM', $pid;
        waitpid($pid, 0);
    }
    return;
}

sub report {
    my @failures = @_;
    if (!@failures) {
        print "ok\n";
        return 0;
    }
    print "FAILED: $_\n" for @failures;
    printf "%d failure(s)\n", scalar @failures;
    return 1;
}

# ---------------------------------------------------------------- links

# The Markdown files of the tree: the top level and up to three folders
# down, skipping build trees and hidden folders.
sub markdown_files {
    my @out;
    my $walk;
    $walk = sub {
        my ($dir, $depth) = @_;
        opendir(my $dh, "$src/$dir") or return;
        for my $e (sort readdir $dh) {
            next if $e =~ /^\./;
            my $rel = $dir eq '.' ? $e : "$dir/$e";
            if (-d "$src/$rel") {
                next if $depth >= 3 || -e "$src/$rel/CMakeCache.txt" || $e =~ /^build/;
                $walk->($rel, $depth + 1);
            } elsif ($e =~ /\.md$/) {
                push @out, $rel;
            }
        }
        closedir $dh;
    };
    $walk->('.', 0);
    return @out;
}

# GitHub's anchor of a heading's text.
sub slug {
    my ($text) = @_;
    $text =~ s/!\[([^\]]*)\]\([^)]*\)/$1/g;      # images: their text
    $text =~ s/\[([^\]]*)\]\([^)]*\)/$1/g;       # links: their text
    $text =~ s/<[^>]+>//g;                         # HTML tags
    $text =~ s/[`*]//g;                            # code spans, emphasis
    $text = lc $text;
    $text =~ s/[^\p{L}\p{M}\p{N}\p{Pc} \-]//g;
    $text =~ s/ /-/g;
    return $text;
}

my %anchor_cache;

sub anchors_of {
    my ($rel) = @_;
    return $anchor_cache{$rel} if $anchor_cache{$rel};
    my %seen;
    my %anchors;
    my $in_fence;
    for my $l (split /\n/, slurp("$src/$rel")) {
        if ($l =~ /^ *(`{3,}|~{3,})/) {
            if (!$in_fence) { $in_fence = $1 } elsif (substr($1, 0, 1) eq substr($in_fence, 0, 1)) { undef $in_fence }
            next;
        }
        next if $in_fence;
        if ($l =~ /^#{1,6}\s+(.*?)\s*#*\s*$/) {
            my $s = slug($1);
            my $a = exists $seen{$s} ? "$s-" . ++$seen{$s} : $s;
            $seen{$s} //= 0;
            $anchors{$a} = 1;
        }
        $anchors{lc $1} = 1 while $l =~ /<a\s+(?:name|id)="([^"]+)"/g;
    }
    return $anchor_cache{$rel} = \%anchors;
}

sub link_check {
    my @failures;
    my ($links, $files) = (0, 0);
    for my $rel (markdown_files()) {
        $files++;
        my $dir = dirname($rel);
        my $lineno = 0;
        my $in_fence;
        for my $l (split /\n/, slurp("$src/$rel")) {
            $lineno++;
            if ($l =~ /^ *(`{3,}|~{3,})/) {
                if (!$in_fence) { $in_fence = $1 } elsif (substr($1, 0, 1) eq substr($in_fence, 0, 1)) { undef $in_fence }
                next;
            }
            next if $in_fence;
            (my $text = $l) =~ s/`[^`]*`//g;      # code spans hold no links
            my @targets;
            push @targets, $1 while $text =~ /\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g;
            push @targets, $1 if $text =~ /^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$/;
            for my $t (@targets) {
                next if $t =~ m{^[a-z][a-z0-9+.-]*:}i;  # http:, https:, mailto: …
                $links++;
                my ($path, $anchor) = $t =~ /^([^#]*)(?:#(.*))?$/;
                my $target = $path eq '' ? $rel : File::Spec->canonpath("$dir/$path");
                $target =~ s{^\./}{};
                if ($path ne '' && !-e "$src/$target") {
                    push @failures, "$rel:$lineno: $t: no such file ($target)";
                    next;
                }
                next unless defined $anchor && $anchor ne '';
                next unless $target =~ /\.md$/ && -f "$src/$target";
                push @failures, "$rel:$lineno: $t: $target has no heading with the anchor #$anchor"
                    unless anchors_of($target)->{$anchor};
            }
        }
    }
    print "$links relative links in $files Markdown files\n";
    return report(@failures);
}
