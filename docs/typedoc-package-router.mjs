// @ts-check
import { Reflection, ReflectionKind } from 'typedoc';
import { MarkdownPageEvent, MarkdownRendererEvent, MemberRouter } from 'typedoc-plugin-markdown';

/**
 * A package with more than one entry point (`@dlock/core` and `@dlock/core/adapter`) is a module holding one module
 * per entry point, and the member router files the root one under the package again: `@dlock/core/@dlock/core/…`.
 * This router gives the root entry point (the module named as its package, by its `@module` tag) the package's own
 * page and directory, so its URLs stay those of a single-entry package when a package gains a subpath export, and
 * files every other entry point one directory down: `@dlock/core/classes/LockClient`,
 * `@dlock/core/adapter/functions/acquireInQueue`.
 */
class PackageRouter extends MemberRouter {
  /**
   * @override
   * @param {import('typedoc').Reflection} target
   * @param {import('typedoc').PageDefinition[]} outPages
   */
  buildChildPages(target, outPages) {
    const root = rootEntryPoint(target);
    if (!root) {
      super.buildChildPages(target, outPages);
      return;
    }
    // The package's page would list its entry points at the URL its root entry point takes; links to the package
    // lead to that entry point's page instead, and the sidebar lists the others.
    super.buildChildPages(root, outPages);
    this.fullUrls.set(target, this.getFullUrl(root));
    target.traverse((child) => {
      if (child !== root) this.buildChildPages(child, outPages);
      return true;
    });
  }

  /**
   * @override
   * @param {import('typedoc').Reflection} reflection
   */
  getIdealBaseName(reflection) {
    const pkg = reflection.parent;
    if (pkg && rootEntryPoint(pkg) === reflection)
      return `${this.getReflectionAlias(pkg)}/${this.entryFileName}`;
    return super.getIdealBaseName(reflection);
  }
}

/**
 * The module of a package's root entry point, when the package has several.
 *
 * @param {import('typedoc').Reflection} reflection
 * @returns {import('typedoc').DeclarationReflection | undefined}
 */
function rootEntryPoint(reflection) {
  if (!reflection.kindOf(ReflectionKind.Module) || !reflection.parent?.kindOf(ReflectionKind.Project)) return;
  if (!reflection.isDeclaration()) return;
  return reflection.children?.find(
    (child) => child.kindOf(ReflectionKind.Module) && child.name === reflection.name,
  );
}

/**
 * The navigation of a package with several entry points lists the root one as a child of the package, under the
 * same name and path; its groups (Classes, Functions, …) move up into the package, before the other entry points.
 *
 * @param {import('typedoc-plugin-markdown').NavigationItem[]} navigation
 */
function hoistRootEntryPoints(navigation) {
  for (const item of navigation) {
    const children = item.children ?? [];
    const index = children.findIndex((child) => child.title === item.title && child.path === item.path);
    if (index === -1) continue;
    const root = children[index];
    children.splice(index, 1);
    children.unshift(...(root?.children ?? []));
  }
}

/**
 * The breadcrumbs of a page in a root entry point name the package and then the entry point, the same name linking
 * to the same page (`API reference / @dlock/core / @dlock/core / LockClient`); one of them goes.
 *
 * @param {import('typedoc-plugin-markdown').MarkdownPageEvent} page
 */
function dropRepeatedCrumb(page) {
  if (!(page.model instanceof Reflection)) return;
  /** @type {Reflection | undefined} */
  let reflection = page.model;
  while (reflection?.parent && rootEntryPoint(reflection.parent) !== reflection)
    reflection = reflection.parent;
  if (!reflection?.parent || !page.contents) return;
  const [first = '', ...rest] = page.contents.split('\n');
  const crumbs = first.split(' / ');
  const kept = crumbs.filter((crumb, i) => i === 0 || crumb !== crumbs[i - 1]);
  page.contents = [kept.join(' / '), ...rest].join('\n');
}

/** @param {import('typedoc-plugin-markdown').MarkdownApplication} app */
export function load(app) {
  app.renderer.defineRouter('package', PackageRouter);
  app.renderer.on(MarkdownRendererEvent.BEGIN, (output) => hoistRootEntryPoints(output.navigation ?? []));
  app.renderer.on(MarkdownPageEvent.END, dropRepeatedCrumb);
}
